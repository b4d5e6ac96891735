/**
 * The reaper: one small native process per sandbox (native/src/reaper/krunbox_reaper.c) that outlives
 * the host process, waits for the sandbox process to end (TTL, idle timeout, crash, or the host's
 * death taking it along), then removes what the sandbox had on the host: its cgroups, its state
 * entry (keeping a history line with the reason the agent recorded, else `crashed`, or
 * `host_exit` when the host died first), its artifacts copied out first.
 *
 * Without it, a sandbox that ends with no krunbox process around (a detached one, or one whose
 * host was SIGKILLed) leaves its state directory and cgroups until some later Runtime sweeps.
 * It is one task that never forks or execs, asleep in poll(2) on a pidfd of the sandbox process
 * (no periodic wake-up), ~50 KiB of private memory (see bench/reaper.ts). When the host ends a
 * sandbox itself, the reaper finds the entry gone and just exits.
 *
 * Its parameters come in a file of the state directory named by a random token, written before
 * it starts: its command line and environment never name the sandbox (nothing mistakes it for
 * a part of the sandbox), and a host that exits right after create() cannot cut them short.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import fsp from 'node:fs/promises'
import path from 'node:path'
import { isSandboxCgroupDir } from './drivers/cgroups.js'
import { loadNative, reaperPath, writeFiles } from './native.js'

export interface ReaperSpec {
  stateRoot: string
  id: string
  /** The sandbox process (bwrap or krun-shim) and its start time (field 22 of /proc/pid/stat). */
  pid: number
  pidStartTime: string
  /** The host process whose death ends an attached sandbox (the reason is then host_exit). */
  ownerPid: number | null
  cgroupDirs: string[]
  history: {
    name: string | null
    image: string
    createdAt: number
    metadata?: Record<string, string>
    artifactsTo?: string
    artifactsDir?: { dev: number; ino: number }
  }
  /** Copied out of the control dir before it is removed (lib/artifacts.ts has the same steps). */
  artifacts?: { to: string; maxBytes: number; dir?: { dev: number; ino: number } }
}

/**
 * Writes the parameter file of one reaper into the state root (private, never over an existing
 * file): one field a line as native/src/reaper/reaper_params.h lists them, ending with `end`, which the
 * reaper checks field by field before it touches anything. Its path, or null when it cannot be written.
 */
export async function writeReaperParams(spec: ReaperSpec): Promise<string | null> {
  const lines = [
    spec.stateRoot,
    spec.id,
    String(spec.pid),
    spec.pidStartTime,
    spec.ownerPid === null ? '' : String(spec.ownerPid),
    JSON.stringify({ id: spec.id, ...spec.history }).slice(0, -1),
    spec.artifacts?.to ?? '',
    spec.artifacts ? String(spec.artifacts.maxBytes + 64 * 1024 * 1024) : '',
    // The directory `to` was at create: the reaper writes into no other (a parent swapped since).
    spec.artifacts?.dir ? `${spec.artifacts.dir.dev}:${spec.artifacts.dir.ino}` : '',
    ...spec.cgroupDirs,
    'end',
  ]
  if (lines.some((l) => l.includes('\n')) || !path.isAbsolute(spec.stateRoot)) return null
  const params = path.join(spec.stateRoot, `.reaper-${crypto.randomBytes(8).toString('hex')}`)
  try {
    // New (O_EXCL), never through a link, 0600: in one pool task (writeFile takes three).
    await writeFiles([{ path: params, data: Buffer.from(lines.join('\n') + '\n'), mode: 0o600 }])
    return params
  } catch {
    return null
  }
}

/**
 * Starts the reaper of one sandbox: its pid, or null when it could not start. Never rejects
 * (without a reaper, the next Runtime's sweep cleans up). It forks on the libuv pool (native
 * spawnAsync): child_process.spawn forks on the main thread and waits there for the exec, a
 * stall of every create (issue 22).
 */
export async function spawnReaper(spec: ReaperSpec): Promise<number | null> {
  let file: string
  try {
    file = reaperPath()
  } catch {
    return null
  }
  const params = await writeReaperParams(spec)
  if (params === null) return null
  try {
    const native = loadNative()
    // An empty environment, a new session: nothing of ours names the sandbox or ends it with us.
    const child = await native.spawnAsync({ file, args: [params], env: [], newSession: true })
    // Reaped when it ends before this process does (else it would stay a zombie); never keeps us alive.
    native.watchExit(child.pid, () => {}, { ref: false })
    return child.pid
  } catch {
    await fsp.rm(params, { force: true })
    return null
  }
}

const CGROUP_ROOT = '/sys/fs/cgroup'

/**
 * Every cgroup directory krunbox made for sandbox `id` that still exists, each leaf before its
 * parent: for the sweep of an entry whose record, which lists them, was never written (its host
 * was killed part-way through the create). Found by the id, in every hierarchy; only directories
 * isSandboxCgroupDir accepts.
 */
export function leftoverCgroupDirs(id: string): string[] {
  const out: string[] = []
  let hierarchies: string[]
  try {
    hierarchies = ['', ...fs.readdirSync(CGROUP_ROOT)]
  } catch {
    return []
  }
  for (const hierarchy of hierarchies) {
    const group = path.join(CGROUP_ROOT, hierarchy, 'krunbox', id)
    if (!isSandboxCgroupDir(group, id)) continue
    let leaves: fs.Dirent[]
    try {
      leaves = fs.readdirSync(group, { withFileTypes: true })
    } catch {
      continue
    }
    for (const leaf of leaves) {
      const dir = path.join(group, leaf.name)
      if (leaf.isDirectory() && isSandboxCgroupDir(dir, id)) out.push(dir)
    }
    out.push(group)
  }
  return out
}
