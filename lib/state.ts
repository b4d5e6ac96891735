/**
 * The state directory: one 0700 entry per sandbox with its record (state.json) and stderr log,
 * so other processes can attach and stale entries can be swept. Only its `ctl/` subdirectory
 * (the control socket and what the agent writes: activity.json, exit.json) is ever shared with
 * the sandbox; the rest is never visible inside it.
 * A small history of ended sandboxes is kept for Runtime.list({ includeHistorical }).
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { SandboxError } from './errors.js'
import type { DestroyedReason } from './sandbox-status.js'

export interface SandboxRecord {
  id: string
  name: string | null
  image: string
  imageVersion: string
  driver: 'namespace' | 'krun'
  pid: number
  pidStartTime: string
  ownerPid: number
  createdAt: number
  expiresAt: number | null
  idleTimeoutMs: number
  tokenSha256: string
  detached: boolean
  metadata: Record<string, string>
  env: Record<string, string>
  cgroupDirs: string[]
}

export interface HistoryRecord {
  id: string
  name: string | null
  image: string
  createdAt: number
  endedAt: number
  reason: DestroyedReason
}

const HISTORY_KEEP = 200

export function sha256(text: string): string {
  return crypto.createHash('sha256').update(text).digest('hex')
}

/**
 * Start time of a live process (field 22 of /proc/pid/stat): tells a live sandbox from a
 * reused pid. A zombie counts as gone (an orphan's zombie may never be reaped in a container).
 */
export function processStartTime(pid: number): string | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    if (fields[0] === 'Z' || fields[0] === 'X') return null
    return fields[19] ?? null
  } catch {
    return null
  }
}

export class StateDir {
  readonly root: string

  constructor(root: string) {
    this.root = root
    try {
      fs.mkdirSync(root, { recursive: true, mode: 0o700 })
      fs.mkdirSync(path.join(root, '.history'), { recursive: true, mode: 0o700 })
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      if (code === 'EACCES' || code === 'EPERM') throw new SandboxError('S005', `state directory ${root} belongs to another user`, { cause: err })
      throw new SandboxError('S103', `cannot create the state directory ${root}: ${(err as Error).message}`, { cause: err })
    }
  }

  sandboxDir(id: string): string {
    return path.join(this.root, id)
  }

  /** The only part of a sandbox's entry the sandbox sees: its socket and the agent's records. */
  controlDir(id: string): string {
    return path.join(this.sandboxDir(id), 'ctl')
  }

  create(id: string): string {
    const dir = this.sandboxDir(id)
    fs.mkdirSync(dir, { mode: 0o700 })
    fs.mkdirSync(this.controlDir(id), { mode: 0o700 })
    return dir
  }

  write(record: SandboxRecord): void {
    const file = path.join(this.sandboxDir(record.id), 'state.json')
    fs.writeFileSync(file + '.tmp', JSON.stringify(record), { mode: 0o600 })
    fs.renameSync(file + '.tmp', file)
  }

  read(id: string): SandboxRecord | null {
    try {
      return JSON.parse(fs.readFileSync(path.join(this.sandboxDir(id), 'state.json'), 'utf8')) as SandboxRecord
    } catch {
      return null
    }
  }

  isAlive(record: SandboxRecord): boolean {
    return processStartTime(record.pid) === record.pidStartTime
  }

  /** Why the agent ended, when it wrote its exit record. */
  exitReason(id: string): DestroyedReason | null {
    try {
      const body = JSON.parse(fs.readFileSync(path.join(this.controlDir(id), 'exit.json'), 'utf8'))
      return ['user_killed', 'ttl_expired', 'idle_expired'].includes(body.reason) ? body.reason : null
    } catch {
      return null
    }
  }

  /** Agent-written activity (active commands), when present. */
  activity(id: string): { activeCommands: number; paused: boolean } | null {
    try {
      const body = JSON.parse(fs.readFileSync(path.join(this.controlDir(id), 'activity.json'), 'utf8'))
      return { activeCommands: Number(body.activeCommands) || 0, paused: body.paused === true }
    } catch {
      return null
    }
  }

  ids(): string[] {
    try {
      return fs.readdirSync(this.root).filter((n) => !n.startsWith('.'))
    } catch {
      return []
    }
  }

  /** Removes an entry, keeping a history line. Idempotent. */
  retire(id: string, reason: DestroyedReason): void {
    const record = this.read(id)
    if (record) {
      const entry: HistoryRecord = { id, name: record.name, image: record.image, createdAt: record.createdAt, endedAt: Date.now(), reason }
      try {
        fs.writeFileSync(path.join(this.root, '.history', `${id}.json`), JSON.stringify(entry), { mode: 0o600 })
      } catch {}
    }
    fs.rmSync(this.sandboxDir(id), { recursive: true, force: true })
    this.#trimHistory()
  }

  history(): HistoryRecord[] {
    const dir = path.join(this.root, '.history')
    const out: HistoryRecord[] = []
    for (const name of safeReaddir(dir)) {
      try {
        out.push(JSON.parse(fs.readFileSync(path.join(dir, name), 'utf8')))
      } catch {}
    }
    return out.sort((a, b) => b.endedAt - a.endedAt)
  }

  #trimHistory(): void {
    const all = this.history()
    for (const old of all.slice(HISTORY_KEEP)) fs.rmSync(path.join(this.root, '.history', `${old.id}.json`), { force: true })
  }
}

function safeReaddir(dir: string): string[] {
  try {
    return fs.readdirSync(dir)
  } catch {
    return []
  }
}
