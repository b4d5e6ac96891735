/**
 * The state directory: one 0700 entry per sandbox with its record (state.json) and stderr log,
 * so other processes can attach and stale entries can be swept. Only its `ctl/` subdirectory
 * (the control socket and what the agent writes: activity.json, exit.json) is ever shared with
 * the sandbox; the rest is never visible inside it.
 * A small history of ended sandboxes is kept for Runtime.list({ includeHistorical }).
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import fsp from 'node:fs/promises'
import path from 'node:path'
import { isSandboxCgroupDir, processCgroupDirs } from './drivers/cgroups.js'
import { isDriverName, type DriverName } from './drivers/names.js'
import { SANDBOX_PROCESS_EXECUTABLES } from './drivers/registry.js'
import type { NetworkPolicy } from './network/policy.js'
import type { DestroyedReason } from './sandbox-status.js'
import { collectArtifacts, type ArtifactsConfig } from './artifacts.js'
import { readBoundedJson } from './bounded-json.js'
import { fsBatch, writeFiles } from './native.js'
import { hostWrite, hostWriteError } from './host-write-error.js'
import { HISTORY_KEEP, HISTORY_TRIM_SLACK, STALE_REAPER_FILE_MS } from './defaults.js'
import { errors } from './protocol/errors.gen.js'

export interface SandboxRecord {
  id: string
  name: string | null
  image: string
  imageVersion: string
  driver: DriverName
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
  /** Kept on the host when the sandbox ends (lib/artifacts.ts). */
  artifacts?: ArtifactsConfig
  /** The sandbox's network policy (null: loopback only); absent in records of older releases. */
  network?: NetworkPolicy | null
}

export interface HistoryRecord {
  id: string
  name: string | null
  image: string
  createdAt: number
  endedAt: number
  reason: DestroyedReason
  metadata?: Record<string, string>
  /** Where the artifacts went (`<artifactsTo>/<id>.tar` and `.json`). */
  artifactsTo?: string
  /** The directory artifactsTo was at create: the record is read back only from it. */
  artifactsDir?: { dev: number; ino: number }
  /** The sandbox never went live: the error its boot failed with (listed with status `failed`). */
  failed?: { code: string; message: string }
}

/** Caps on what the host reads back: the agent's records (sandbox-writable) and our own. */
const AGENT_RECORD_MAX = 64 * 1024
const STATE_RECORD_MAX = 8 * 1024 * 1024
const ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
/** statfs magic numbers of filesystems a state directory can never live on. */
const PSEUDO_FILESYSTEMS: Record<number, string> = {
  0x9fa0: 'proc',
  0x62656572: 'sysfs',
  0x27e0eb: 'cgroup',
  0x63677270: 'cgroup2',
  0x64626720: 'debugfs',
}
/** Retired entries wait here, as `<pid>-<uuid>` of the process removing them, until they are deleted. */
const TRASH = '.trash'
/** open(2)'s O_PATH (Linux, same value on x86-64 and arm64); Node's fs.constants lacks it. */
const O_PATH = 0o10000000

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

/**
 * The marker create() leaves in an entry: `.creator-<pid namespace>-<pid>-<start time>` (see
 * creatorAlive). A pid means nothing in another pid namespace (two containers sharing a state
 * directory): there the marker is not used.
 */
const CREATOR_MARKER = /^\.creator-(\d+)-(\d+)-(\d+)$/
let ownMarker: string | null = null
function creatorMarker(): string {
  ownMarker ??= `.creator-${pidNamespace()}-${process.pid}-${processStartTime(process.pid) ?? '0'}`
  return ownMarker
}
let ownPidNamespace: string | null = null
function pidNamespace(): string {
  if (ownPidNamespace === null) {
    try {
      ownPidNamespace = /\[(\d+)\]/.exec(fs.readlinkSync('/proc/self/ns/pid'))?.[1] ?? '0'
    } catch {
      ownPidNamespace = '0'
    }
  }
  return ownPidNamespace
}

/** A record read back from disk, with every field checked: a corrupt or forged one is null. */
function parseRecord(value: unknown, id: string): SandboxRecord | null {
  if (typeof value !== 'object' || value === null) return null
  const r = value as Record<string, unknown>
  const isStringMap = (m: unknown) =>
    typeof m === 'object' && m !== null && !Array.isArray(m) && Object.values(m).every((v) => typeof v === 'string')
  const ok =
    r.id === id &&
    (r.name === null || typeof r.name === 'string') &&
    typeof r.image === 'string' &&
    typeof r.imageVersion === 'string' &&
    isDriverName(r.driver) &&
    Number.isSafeInteger(r.pid) &&
    (r.pid as number) > 1 &&
    typeof r.pidStartTime === 'string' &&
    r.pidStartTime !== '' &&
    Number.isSafeInteger(r.ownerPid) &&
    typeof r.createdAt === 'number' &&
    Number.isFinite(r.createdAt) &&
    (r.expiresAt === null || (typeof r.expiresAt === 'number' && Number.isFinite(r.expiresAt))) &&
    typeof r.idleTimeoutMs === 'number' &&
    typeof r.tokenSha256 === 'string' &&
    typeof r.detached === 'boolean' &&
    isStringMap(r.metadata) &&
    isStringMap(r.env) &&
    Array.isArray(r.cgroupDirs) &&
    r.cgroupDirs.every((d) => isSandboxCgroupDir(d, id)) &&
    (r.artifacts === undefined || isArtifactsConfig(r.artifacts)) &&
    (r.network === undefined || typeof r.network === 'object')
  return ok ? (r as unknown as SandboxRecord) : null
}

function isArtifactsConfig(a: unknown): boolean {
  const c = a as Record<string, unknown>
  return (
    typeof c === 'object' &&
    c !== null &&
    typeof c.to === 'string' &&
    path.isAbsolute(c.to) &&
    Number.isSafeInteger(c.maxBytes) &&
    Array.isArray(c.paths)
  )
}

/** The executable of a live process, without the " (deleted)" an upgraded binary gets. */
function processExecutable(pid: number): string | null {
  try {
    return fs.readlinkSync(`/proc/${pid}/exe`).replace(/ \(deleted\)$/, '')
  } catch {
    return null
  }
}

/** Creates a directory and its missing parents one by one (mkdirSync recursive spins on /proc). */
function makeStateRoot(root: string): void {
  const realFilesystem = (dir: string) => {
    const type = PSEUDO_FILESYSTEMS[fs.statfsSync(dir).type]
    if (type) throw Object.assign(new Error(`${dir} is on ${type}, not a real filesystem`), { code: 'EINVAL' })
  }
  let dir = '/'
  for (const part of root.split('/').filter(Boolean)) {
    const parent = dir
    dir = path.join(dir, part)
    const st = fs.statSync(dir, { throwIfNoEntry: false })
    if (st === undefined) {
      realFilesystem(parent)
      fs.mkdirSync(dir, { mode: 0o700 })
    } else if (!st.isDirectory()) throw Object.assign(new Error(`${dir} is not a directory`), { code: 'ENOTDIR' })
  }
  realFilesystem(root)
}

export class StateDir {
  readonly root: string
  /** Removals under way in this process (see retire). */
  #removals = new Set<Promise<void>>()
  #trimming = false

  constructor(root: string) {
    if (typeof root !== 'string' || root.length === 0 || root.includes('\0'))
      throw errors.badRuntimeConfig({
        subject: 'stateDir',
        problem: `must be a non-empty path, got ${JSON.stringify(root)}`,
      })
    this.root = path.resolve(root)
    try {
      makeStateRoot(this.root)
      fs.mkdirSync(path.join(this.root, '.history'), { recursive: true, mode: 0o700 })
      fs.mkdirSync(path.join(this.root, TRASH), { recursive: true, mode: 0o700 })
      fs.accessSync(this.root, fs.constants.R_OK | fs.constants.W_OK | fs.constants.X_OK)
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      if (code === 'EACCES' || code === 'EPERM')
        throw errors.accessDenied(
          { subject: `state directory ${JSON.stringify(root)}`, problem: 'belongs to another user' },
          { cause: err },
        )
      // A full, read-only or quota'd filesystem is the machine's state, not a wrong configuration.
      if (code === 'ENOSPC' || code === 'EDQUOT' || code === 'EROFS') throw hostWriteError(err, this.root)!
      throw errors.badRuntimeConfig(
        { subject: `state directory ${JSON.stringify(root)}`, problem: `cannot be used: ${(err as Error).message}` },
        { cause: err },
      )
    }
  }

  sandboxDir(id: string): string {
    return path.join(this.root, id)
  }

  /** The only part of a sandbox's entry the sandbox sees: its socket and the agent's records. */
  controlDir(id: string): string {
    return path.join(this.sandboxDir(id), 'ctl')
  }

  /**
   * The agent's socket in ctl/, opened without following a symlink (O_PATH|O_NOFOLLOW) and checked
   * to be a socket: connect to `path` (this descriptor's /proc link) until close().
   */
  openControlSocket(id: string): { path: string; uid: number; close(): void } {
    const file = path.join(this.controlDir(id), 'agent.sock')
    let fd: number
    try {
      fd = fs.openSync(file, O_PATH | fs.constants.O_NOFOLLOW)
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      if (code === 'ENOENT')
        throw errors.connectionLost(
          { subject: `sandbox ${id}`, problem: `has no control socket at ${file}` },
          { cause: err },
        )
      throw errors.connectionLost(
        {
          subject: `the control socket of sandbox ${id} at ${file}`,
          problem: `cannot be opened (${code}: a symlink put there from inside the sandbox is never followed)`,
        },
        { cause: err },
      )
    }
    const st = fs.fstatSync(fd)
    if (!st.isSocket()) {
      fs.closeSync(fd)
      throw errors.connectionLost({
        subject: `the control socket of sandbox ${id} at ${file}`,
        problem: 'is not a socket; refusing to connect',
      })
    }
    return { path: `/proc/self/fd/${fd}`, uid: st.uid, close: () => fs.closeSync(fd) }
  }

  // Creating, writing and retiring entries go through the libuv pool: on a busy disk each
  // metadata operation may wait for the journal, and on the main thread that stalls the host.
  // Batched where they can be (fsBatch, writeFiles): each task handed to the pool costs the main
  // thread a wake-up of a pool thread.

  /**
   * The entry of a sandbox being created, with a marker naming this process and its start time
   * (a directory: it needs no data block, so it is made on a full filesystem too): until the
   * record is written, sweep() tells a create still under way in a live process from the
   * half-made entry of a process that died (SIGKILL) part-way. The entry is made in this
   * process's trash and renamed into place, so it never appears without its marker; one left in
   * the trash by a killed process goes with the rest of its trash (removeAbandonedTrash).
   */
  async create(id: string): Promise<string> {
    const dir = this.sandboxDir(id)
    const staging = this.#trashName()
    try {
      await fsBatch([
        { op: 'mkdir', path: staging, mode: 0o700 },
        { op: 'mkdir', path: path.join(staging, creatorMarker()), mode: 0o700 },
        { op: 'mkdir', path: path.join(staging, path.basename(this.controlDir(id))), mode: 0o700 },
      ])
      await hostWrite(dir, () => fsp.rename(staging, dir))
    } catch (err) {
      this.#removeTree(staging)
      throw err
    }
    return dir
  }

  /**
   * Whether the process that made an entry (create()) still runs: true or false from its marker,
   * null when the entry has none (made by an older krunbox, or gone).
   */
  creatorAlive(id: string): boolean | null {
    if (!ID.test(id)) return null
    for (const name of safeReaddir(this.sandboxDir(id))) {
      const m = CREATOR_MARKER.exec(name)
      if (m) return m[1] === pidNamespace() ? processStartTime(Number(m[2])) === m[3] : null
    }
    return null
  }

  /** Once per entry, in the directory create() made: the temporary file is new (O_EXCL). */
  async write(record: SandboxRecord): Promise<void> {
    const file = path.join(this.sandboxDir(record.id), 'state.json')
    await writeFiles([{ path: file + '.tmp', data: Buffer.from(JSON.stringify(record)), mode: 0o600 }])
    await hostWrite(file, () => fsp.rename(file + '.tmp', file))
  }

  /** The record of a sandbox; null when missing, unreadable, oversized or not well-formed. */
  read(id: string): SandboxRecord | null {
    if (!ID.test(id)) return null
    return parseRecord(readBoundedJson(path.join(this.sandboxDir(id), 'state.json'), STATE_RECORD_MAX), id)
  }

  /**
   * Whether the record's sandbox process still runs. A pid alone could name any process (reused,
   * or forged in the record), so it must also have the recorded start time, and be in the cgroup
   * krunbox made for this sandbox, or, where cgroups are not enforced, run a driver's sandbox executable (bwrap, krun-shim).
   */
  isAlive(record: SandboxRecord): boolean {
    if (processStartTime(record.pid) !== record.pidStartTime) return false
    if (record.cgroupDirs.length > 0) {
      const mine = record.cgroupDirs.filter((d) => isSandboxCgroupDir(d, record.id))
      return processCgroupDirs(record.pid).some((dir) => mine.some((m) => dir === m || dir.startsWith(m + '/')))
    }
    const exe = processExecutable(record.pid)
    return exe !== null && SANDBOX_PROCESS_EXECUTABLES.has(path.basename(exe))
  }

  /**
   * Why the agent ended, when it wrote its exit record (sandbox-writable: read with bounds). The
   * reaper may have retired the entry first (it wakes the moment the sandbox process ends): the
   * reason it read from that record is then in its history line.
   */
  exitReason(id: string): DestroyedReason | null {
    let body = readBoundedJson(path.join(this.controlDir(id), 'exit.json'), AGENT_RECORD_MAX) as Record<
      string,
      unknown
    > | null
    // Whoever retires an entry writes its history line before removing the entry: while the
    // reaper empties the directory in place, exit.json may be gone and the directory not yet.
    if (body === null) body = readBoundedJson(this.#historyFile(id), AGENT_RECORD_MAX) as Record<string, unknown> | null
    const reason = typeof body === 'object' && body !== null ? body.reason : undefined
    return reason === 'user_killed' || reason === 'ttl_expired' || reason === 'idle_expired' || reason === 'host_exit'
      ? reason
      : null
  }

  /**
   * Agent-written activity (active commands), when present (sandbox-writable: read with bounds),
   * and the deadlines the agent enforces (sb.extendTtl() and setIdleTimeout() move them; absent
   * from an older agent's record, or not numbers: undefined).
   */
  activity(
    id: string,
  ): { activeCommands: number; paused: boolean; expiresAt?: number | null; idleTimeoutMs?: number } | null {
    const body = readBoundedJson(path.join(this.controlDir(id), 'activity.json'), AGENT_RECORD_MAX) as Record<
      string,
      unknown
    > | null
    if (typeof body !== 'object' || body === null || Array.isArray(body)) return null
    const active = Number(body.activeCommands)
    const ms = (v: unknown) => (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 ? v : undefined)
    const expiresAt = ms(body.expiresAt)
    const idleTimeoutMs = ms(body.idleTimeoutMs)
    return {
      activeCommands: Number.isSafeInteger(active) && active > 0 ? active : 0,
      paused: body.paused === true,
      ...(expiresAt !== undefined && { expiresAt: expiresAt === 0 ? null : expiresAt }),
      ...(idleTimeoutMs !== undefined && { idleTimeoutMs }),
    }
  }

  /** How long ago a sandbox's entry last changed (Infinity when it is gone). */
  ageMs(id: string): number {
    const st = fs.lstatSync(this.sandboxDir(id), { throwIfNoEntry: false })
    return st ? Date.now() - st.ctimeMs : Infinity
  }

  /** Parameter files of reapers that never started (a reaper reads and deletes its own at once). */
  removeStaleReaperFiles(): void {
    for (const name of safeReaddir(this.root)) {
      if (!name.startsWith('.reaper-')) continue
      const file = path.join(this.root, name)
      const st = fs.lstatSync(file, { throwIfNoEntry: false })
      if (st && Date.now() - st.ctimeMs > STALE_REAPER_FILE_MS) fs.rmSync(file, { force: true })
    }
  }

  /** Ids of the sandbox entries (anything else in the directory is ignored). */
  ids(): string[] {
    try {
      return fs.readdirSync(this.root).filter((n) => ID.test(n))
    } catch {
      return []
    }
  }

  /**
   * Removes an entry, keeping a history line. Idempotent. The entry is renamed into the trash and
   * deleted in the background (settled() waits for it): stop() does not wait for a recursive rm.
   */
  async retire(id: string, reason: DestroyedReason): Promise<void> {
    const entry = this.#endEntry(id, reason)
    if (entry) await fsp.writeFile(this.#historyFile(id), JSON.stringify(entry), { mode: 0o600 }).catch(() => {})
    const trash = this.#trashName()
    const moved = await fsp.rename(this.sandboxDir(id), trash).then(
      () => trash,
      // ENOENT: already retired. Anything else: remove it where it is.
      (err: NodeJS.ErrnoException) => (err.code === 'ENOENT' ? null : this.sandboxDir(id)),
    )
    if (moved) this.#removeTree(moved)
    if (!this.#trimming) this.#track(this.#trimHistory())
  }

  /** retire(), blocking: for the host's exit (no event loop left to finish it) and sweep(). */
  retireSync(id: string, reason: DestroyedReason): void {
    const entry = this.#endEntry(id, reason)
    if (entry) {
      try {
        fs.writeFileSync(this.#historyFile(id), JSON.stringify(entry), { mode: 0o600 })
      } catch {}
    }
    fs.rmSync(this.sandboxDir(id), { recursive: true, force: true })
  }

  /**
   * The history line of a sandbox whose boot failed, written whether or not its entry existed (an
   * image error comes before it), over the line its retirement wrote.
   */
  async recordFailed(
    entry: Omit<HistoryRecord, 'endedAt' | 'reason' | 'failed'>,
    error: { code: string; message: string },
  ): Promise<void> {
    const line: HistoryRecord = {
      ...entry,
      endedAt: Date.now(),
      reason: 'crashed',
      failed: { code: error.code, message: error.message.slice(0, 4096) },
    }
    await fsp.writeFile(this.#historyFile(entry.id), JSON.stringify(line), { mode: 0o600 }).catch(() => {})
    if (!this.#trimming) this.#track(this.#trimHistory())
  }

  /** The history line of an ending sandbox, its artifacts kept first; null without a record. */
  #endEntry(id: string, reason: DestroyedReason): HistoryRecord | null {
    const record = this.read(id)
    if (!record) return null
    const entry: HistoryRecord = {
      id,
      name: record.name,
      image: record.image,
      createdAt: record.createdAt,
      metadata: record.metadata,
      endedAt: Date.now(),
      reason,
    }
    if (record.artifacts) {
      collectArtifacts(this.controlDir(id), id, record.artifacts)
      entry.artifactsTo = record.artifacts.to
      if (record.artifacts.dir) entry.artifactsDir = record.artifacts.dir
    }
    return entry
  }

  #historyFile(id: string): string {
    return path.join(this.root, '.history', `${id}.json`)
  }

  #trashName(): string {
    return path.join(this.root, TRASH, `${process.pid}-${crypto.randomUUID()}`)
  }

  /** Resolves once every removal this process started has finished (Runtime.close awaits it). */
  async settled(): Promise<void> {
    while (this.#removals.size > 0) await Promise.all(this.#removals)
  }

  /** Finishes this process's removals now, blocking: for the host's exit, when no event loop is left. */
  settleSync(): void {
    for (const name of safeReaddir(path.join(this.root, TRASH))) {
      if (name.startsWith(`${process.pid}-`))
        fs.rmSync(path.join(this.root, TRASH, name), { recursive: true, force: true })
    }
  }

  /** Trash left by processes that died before deleting it (a SIGKILLed host). */
  removeAbandonedTrash(): void {
    for (const name of safeReaddir(path.join(this.root, TRASH))) {
      const pid = Number(name.split('-')[0])
      if (pid !== process.pid && processStartTime(pid) === null) this.#removeTree(path.join(this.root, TRASH, name))
    }
  }

  history(): HistoryRecord[] {
    const dir = path.join(this.root, '.history')
    const out: HistoryRecord[] = []
    for (const name of safeReaddir(dir)) {
      const h = readBoundedJson(path.join(dir, name), AGENT_RECORD_MAX) as HistoryRecord | null
      if (h && typeof h === 'object' && typeof h.id === 'string' && typeof h.endedAt === 'number') out.push(h)
    }
    return out.sort((a, b) => b.endedAt - a.endedAt).slice(0, HISTORY_KEEP)
  }

  /** In one task of the libuv pool, not one per entry (fs.rm walks a tree call by call). */
  #removeTree(dir: string): void {
    this.#track(fsBatch([{ op: 'removeTree', path: dir }]))
  }

  #track(removal: Promise<unknown>): void {
    const settled = removal.then(
      () => {},
      () => {},
    )
    this.#removals.add(settled)
    void settled.then(() => this.#removals.delete(settled))
  }

  /**
   * Keeps the newest HISTORY_KEEP lines (by the time each was written), trimming only once the
   * slack is used up, so that a stop does not read the whole history.
   */
  async #trimHistory(): Promise<void> {
    this.#trimming = true
    try {
      const dir = path.join(this.root, '.history')
      const names = await fsp.readdir(dir)
      if (names.length <= HISTORY_KEEP + HISTORY_TRIM_SLACK) return
      const aged = await Promise.all(
        names.map(async (name) => ({
          name,
          mtimeMs: (await fsp.stat(path.join(dir, name)).catch(() => null))?.mtimeMs ?? 0,
        })),
      )
      aged.sort((a, b) => b.mtimeMs - a.mtimeMs)
      await Promise.all(aged.slice(HISTORY_KEEP).map(({ name }) => fsp.rm(path.join(dir, name), { force: true })))
    } finally {
      this.#trimming = false
    }
  }
}

function safeReaddir(dir: string): string[] {
  try {
    return fs.readdirSync(dir)
  } catch {
    return []
  }
}
