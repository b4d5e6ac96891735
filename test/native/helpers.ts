import { execFileSync } from 'node:child_process'
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

export const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '..', '..')

/** Builds the addon, krun-shim and the libkrun double if their sources changed (a no-op otherwise). */
export function ensureNativeBuilt(): void {
  execFileSync('sh', [join(repoRoot, 'scripts/build-native.sh')], { stdio: ['ignore', 'ignore', 'inherit'] })
}

export function makeTempDir(prefix: string): { dir: string; cleanup: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  return { dir, cleanup: () => rmSync(dir, { recursive: true, force: true }) }
}

/** Opens a file holding `content` for reading; the caller closes the fd. */
export function fdWithContent(dir: string, name: string, content: string): number {
  const path = join(dir, name)
  writeFileSync(path, content)
  return openSync(path, 'r')
}

/** Runs `fn` with a file opened for writing and returns what was written to it. */
export async function captureToFile(dir: string, name: string, fn: (fd: number) => Promise<void>): Promise<string> {
  const path = join(dir, name)
  const fd = openSync(path, 'w')
  try {
    await fn(fd)
  } finally {
    closeSync(fd)
  }
  return readFileSync(path, 'utf8')
}

/**
 * fd numbers from `ls -l /proc/self/fd` output, without the directory fd ls
 * itself opens to list /proc/self/fd.
 */
export function fdsFromLsOutput(output: string): number[] {
  const fds: number[] = []
  for (const line of output.split('\n')) {
    const m = /\s(\d+) -> (.*)$/.exec(line)
    if (!m) continue
    if (/^\/proc\/\d+\/fd$/.test(m[2])) continue
    fds.push(Number(m[1]))
  }
  return fds.sort((a, b) => a - b)
}

/** 'R', 'S', 'Z', … from /proc/<pid>/stat, or null when the process is gone. */
export function processState(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0]
  } catch {
    return null
  }
}

/** Fields of /proc/<pid or self>/stat after the command name: [state, ppid, pgrp, session, …]. */
export function statFields(stat: string): string[] {
  return stat.slice(stat.lastIndexOf(')') + 2).trim().split(' ')
}

export async function until(predicate: () => boolean, timeoutMs: number, stepMs = 20): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (predicate()) return true
    await new Promise((r) => setTimeout(r, stepMs))
  }
  return predicate()
}
