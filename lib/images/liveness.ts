/**
 * Is the process that left a lock or a temporary directory still running? A pid alone can be
 * reused, so owners are identified by pid plus the kernel's start time of that pid.
 */
import fs from 'node:fs'

/** Fields 3 (state) and 22 (start time in clock ticks since boot) of /proc/<pid>/stat, or null if gone. */
function processStat(pid: number): { state: string; start: string | null } | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    // The command name (field 2) is in parentheses and may contain spaces: count from its end.
    const afterName = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    return { state: afterName[0], start: afterName[19] ?? null }
  } catch {
    return null
  }
}

export function processStartTime(pid: number): string | null {
  return processStat(pid)?.start ?? null
}

export interface ProcessIdentity {
  pid: number
  start: string | null
}

export function selfIdentity(): ProcessIdentity {
  return { pid: process.pid, start: processStartTime(process.pid) }
}

export function isProcessAlive(owner: ProcessIdentity): boolean {
  if (!Number.isInteger(owner.pid) || owner.pid <= 0) return false
  try {
    process.kill(owner.pid, 0)
  } catch (err) {
    // EPERM: it exists but belongs to someone else.
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false
  }
  const stat = processStat(owner.pid)
  // A zombie does nothing any more; an orphan's stays until its new parent reaps it, which may be never.
  if (stat?.state === 'Z' || stat?.state === 'X') return false
  // Without /proc we cannot tell reuse apart: trust the pid.
  if (stat?.start == null || owner.start === null) return true
  return stat.start === owner.start
}
