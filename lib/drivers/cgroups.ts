/**
 * Per-sandbox cgroups for memory, cpu and process-count limits. Where the host doesn't let us
 * create them (rootless, no delegation) the sandbox still runs and the reason is reported.
 * The sandbox process joins them before it execs (native spawn writes its pid to cgroup.procs).
 *
 * With `workloadLeaf` (v1, the namespace driver) each controller gets a parent group per sandbox
 * with two leaves: `agent`, which bwrap and the agent join, and `workload`, which carries the
 * limits and which the agent's spawning thread joins (through the `tasks` files opened here and
 * inherited as fds), so every command is born in it. The workload can then exhaust its own
 * memory and pids, and burn its cpu, without the agent being the one that dies or waits.
 *
 * Creating them goes through the libuv pool: a cgroup mkdir can wait in the kernel for
 * milliseconds, and the host's event loop must not wait with it (issue 22).
 */
import fs from 'node:fs'
import fsp from 'node:fs/promises'
import path from 'node:path'
import { fsBatch, type FsOp } from '../native.js'

const ROOT = '/sys/fs/cgroup'
const V1_CONTROLLERS = ['memory', 'pids', 'cpu'] as const

export interface Limits {
  memoryMb: number
  cpus: number
  pidsMax: number
  /** The size of each of the sandbox's three tmpfs (its writable layer, /tmp, /dev/shm): the agent leaf's limit allows for them. */
  diskMb?: number
}

/**
 * The agent's own memory in the v1 split layout: its Go heap (64 MiB of retained output, 8 MiB
 * of frames queued for the host, a 192 MiB soft limit: agent/boot/memory.go), bwrap, and the
 * page cache of what it reads. Files the agent writes for the caller (writeFile, upload) are
 * charged to it too, up to the size of the tmpfs it writes them into; its leaf's limit is this
 * plus three times diskMb, so an upload fails with ENOSPC before the agent's leaf runs out.
 */
export const AGENT_MEMORY_MB = 256

/** The agent leaf's memory limit in bytes: its own memory and what its tmpfs can hold. */
export function agentLeafLimitBytes(limits: Limits): number {
  return (AGENT_MEMORY_MB + 3 * (limits.diskMb ?? 0)) * 1024 * 1024
}

export interface SandboxCgroups {
  enforced: boolean
  reason: string | null
  dirs: string[]
  /** The files the sandbox process joins its groups through before exec (native spawn's cgroupJoinFiles). */
  joinFiles: string[]
  /** The workload leaf, when the agent runs outside it (see the top of this file). */
  workload: WorkloadLeaf | null
  /** Kills every process left in the groups and removes them, off the event loop. Idempotent. */
  remove(): Promise<void>
  /** The agent is up: the sandbox gets a running sandbox's cpu weight (see BOOT_CPU). Never rejects. */
  booted(): Promise<void>
}

export interface WorkloadLeaf {
  /** The leaf's `tasks` files (memory, pids, cpu): a thread that writes "0" into one moves there. */
  tasksFiles: string[]
  /** The leaf's memory.oom_control, whose oom_kill counter tells a command the limit killed it. */
  oomControlFile: string
}

/** The two leaves of the v1 split layout (see the top of this file). */
const AGENT_LEAF = 'agent'
const WORKLOAD_LEAF = 'workload'

/**
 * The cpu.shares of the two leaves: the agent's wakeups (timeouts, signals, replies) win over
 * any number of busy commands. The workload's cpu is capped by its quota, not by these.
 */
const AGENT_CPU_SHARES = 10240
const WORKLOAD_CPU_SHARES = 128

/**
 * A sandbox boots with a tenth of a running sandbox's cpu weight (the group of the whole
 * sandbox: cpu.shares in v1, cpu.weight in v2), and gets the full weight once its agent is up.
 * Creates (a pool refilling, a burst of them) then yield the cores to the sandboxes already
 * serving: an exec on one of them slowed 1.57x during back-to-back creates with equal weights.
 */
const BOOT_CPU = {
  v1: { file: 'cpu.shares', booting: '102', running: '1024' },
  v2: { file: 'cpu.weight', booting: '10', running: '100' },
}

/** The weight file of a sandbox's group: its booting value, and the function that gives it the running one (never rejects). */
function bootWeight(dir: string, version: 'v1' | 'v2'): { file: string; booting: string; booted: () => Promise<void> } {
  const { file, booting, running } = BOOT_CPU[version]
  const weightFile = path.join(dir, file)
  // On the way to ready: one pool task (fsBatch), not writeFile's three. Caught: a sandbox already gone.
  const booted = () =>
    fsBatch([{ op: 'write', path: weightFile, data: running }]).then(
      () => {},
      () => {},
    )
  return { file: weightFile, booting, booted }
}

export type CgroupMode = 'v1' | 'v2' | 'none'

export function cgroupMode(): CgroupMode {
  if (fs.existsSync(path.join(ROOT, 'cgroup.controllers'))) return 'v2'
  if (fs.existsSync(path.join(ROOT, 'memory'))) return 'v1'
  return 'none'
}

const write = (file: string, value: string): Promise<void> => fsp.writeFile(file, value)

function notEnforced(reason: string): SandboxCgroups {
  return {
    enforced: false,
    reason,
    dirs: [],
    joinFiles: [],
    workload: null,
    remove: async () => {},
    booted: async () => {},
  }
}

export async function createCgroups(
  id: string,
  limits: Limits,
  options: { workloadLeaf?: boolean } = {},
): Promise<SandboxCgroups> {
  const mode = cgroupMode()
  const dirs: string[] = []
  let booted = async () => {}
  try {
    if (mode === 'v1' && options.workloadLeaf) {
      return await createV1Leaves(id, limits, dirs)
    } else if (mode === 'v1') {
      for (const controller of V1_CONTROLLERS) {
        const dir = path.join(ROOT, controller, 'krunbox', id)
        dirs.push(dir)
        await fsp.mkdir(dir, { recursive: true })
      }
      await write(path.join(dirs[0], 'memory.limit_in_bytes'), String(limits.memoryMb * 1024 * 1024))
      await write(path.join(dirs[1], 'pids.max'), limits.pidsMax > 0 ? String(limits.pidsMax) : 'max')
      await write(path.join(dirs[2], 'cpu.cfs_period_us'), '100000')
      await write(path.join(dirs[2], 'cpu.cfs_quota_us'), String(Math.round(limits.cpus * 100000)))
      const weight = bootWeight(dirs[2], 'v1')
      await write(weight.file, weight.booting)
      booted = weight.booted
    } else if (mode === 'v2') {
      const parent = path.join(ROOT, 'krunbox')
      await fsp.mkdir(parent, { recursive: true })
      await write(path.join(ROOT, 'cgroup.subtree_control'), '+memory +pids +cpu')
      await write(path.join(parent, 'cgroup.subtree_control'), '+memory +pids +cpu')
      const dir = path.join(parent, id)
      await fsp.mkdir(dir)
      dirs.push(dir)
      await write(path.join(dir, 'memory.max'), String(limits.memoryMb * 1024 * 1024))
      await write(path.join(dir, 'pids.max'), limits.pidsMax > 0 ? String(limits.pidsMax) : 'max')
      await write(path.join(dir, 'cpu.max'), `${Math.round(limits.cpus * 100000)} 100000`)
      const weight = bootWeight(dir, 'v2')
      await write(weight.file, weight.booting)
      booted = weight.booted
    } else {
      return notEnforced('no cgroup filesystem at /sys/fs/cgroup')
    }
  } catch (err) {
    await removeCgroupDirs(dirs)
    // fs/promises errors carry their errno name as code; fsBatch's, in details.
    const errnoName =
      (err as { details?: { errnoName?: string } }).details?.errnoName ?? (err as NodeJS.ErrnoException).code
    return notEnforced(
      `cannot create cgroups (${errnoName ?? (err as Error).message}); limits are not enforced by cgroups`,
    )
  }
  return {
    enforced: true,
    reason: null,
    dirs,
    joinFiles: dirs.map((d) => path.join(d, 'cgroup.procs')),
    workload: null,
    remove: () => removeCgroupDirs(dirs),
    booted,
  }
}

/** The v1 split layout: krunbox/<id>/{agent,workload} per controller. `dirs` lists leaves before parents. */
async function createV1Leaves(id: string, limits: Limits, dirs: string[]): Promise<SandboxCgroups> {
  // Plain names joined by hand: path.join's normalizing of these ~40 paths was a third of what a create allocated.
  const group = (controller: string) => `${ROOT}/${controller}/krunbox/${id}`
  const leaf = (controller: string, name: string) => `${group(controller)}/${name}`
  const leaves = V1_CONTROLLERS.flatMap((c) => [leaf(c, AGENT_LEAF), leaf(c, WORKLOAD_LEAF)])
  // All listed first, so a failure half-way still removes whatever was made.
  dirs.push(...leaves, ...V1_CONTROLLERS.map(group))
  const weight = bootWeight(group('cpu'), 'v1')
  // One task of the libuv pool for all of it: 16 fs/promises calls were 16 wake-ups of a pool thread.
  await fsBatch([
    ...V1_CONTROLLERS.flatMap((c): FsOp[] => [
      { op: 'mkdir', path: `${ROOT}/${c}/krunbox`, existOk: true },
      { op: 'mkdir', path: group(c) },
      { op: 'mkdir', path: leaf(c, AGENT_LEAF) },
      { op: 'mkdir', path: leaf(c, WORKLOAD_LEAF) },
    ]),
    { op: 'write', path: weight.file, data: weight.booting },
    {
      op: 'write',
      path: `${leaf('memory', WORKLOAD_LEAF)}/memory.limit_in_bytes`,
      data: String(limits.memoryMb * 1024 * 1024),
    },
    // The agent's too: a runaway agent is bounded (it had no limit at all).
    {
      op: 'write',
      path: `${leaf('memory', AGENT_LEAF)}/memory.limit_in_bytes`,
      data: String(agentLeafLimitBytes(limits)),
    },
    // One more than asked: the agent's spawning thread lives in the leaf (it is what puts commands there).
    {
      op: 'write',
      path: `${leaf('pids', WORKLOAD_LEAF)}/pids.max`,
      data: limits.pidsMax > 0 ? String(limits.pidsMax + 1) : 'max',
    },
    // A new group's period is the kernel's default, 100 ms (cpu.cfs_period_us 100000).
    {
      op: 'write',
      path: `${leaf('cpu', WORKLOAD_LEAF)}/cpu.cfs_quota_us`,
      data: String(Math.round(limits.cpus * 100000)),
    },
    { op: 'write', path: `${leaf('cpu', WORKLOAD_LEAF)}/cpu.shares`, data: String(WORKLOAD_CPU_SHARES) },
    { op: 'write', path: `${leaf('cpu', AGENT_LEAF)}/cpu.shares`, data: String(AGENT_CPU_SHARES) },
  ])
  return {
    enforced: true,
    reason: null,
    dirs,
    // `tasks`, not cgroup.procs: the spawned child, one thread, joins with "0", which moves it
    // without the kernel's process-wide lock and its RCU wait (0.3 ms instead of 4.7 per create).
    joinFiles: V1_CONTROLLERS.map((c) => `${leaf(c, AGENT_LEAF)}/tasks`),
    workload: {
      tasksFiles: V1_CONTROLLERS.map((c) => `${leaf(c, WORKLOAD_LEAF)}/tasks`),
      oomControlFile: `${leaf('memory', WORKLOAD_LEAF)}/memory.oom_control`,
    },
    remove: () => removeCgroupDirs(dirs),
    booted: weight.booted,
  }
}

/** A directory krunbox makes for a sandbox: ROOT[/<controller>]/krunbox/<id>[/<leaf>]; group 1 is the id. */
const SANDBOX_CGROUP_DIR = new RegExp(
  `^${ROOT}(?:/(?:${V1_CONTROLLERS.join('|')}))?/krunbox/([0-9a-f-]{36})(?:/(?:${AGENT_LEAF}|${WORKLOAD_LEAF}))?$`,
)

/**
 * Whether dir is one krunbox makes for sandbox `id`. A record read back from disk may be
 * forged; only such directories are ever trusted or removed.
 */
export function isSandboxCgroupDir(dir: unknown, id: string): dir is string {
  return typeof dir === 'string' && SANDBOX_CGROUP_DIR.exec(dir)?.[1] === id
}

/** The cgroup directories (as paths under ROOT) a process is in, from /proc/<pid>/cgroup. */
export function processCgroupDirs(pid: number): string[] {
  let text: string
  try {
    text = fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8')
  } catch {
    return []
  }
  const dirs: string[] = []
  for (const line of text.split('\n')) {
    const m = /^\d+:([^:]*):(\/.*)$/.exec(line)
    if (!m) continue
    const [, controllers, cgroupPath] = m
    dirs.push(controllers === '' ? path.join(ROOT, cgroupPath) : path.join(ROOT, controllers, cgroupPath))
  }
  return dirs
}

/** Only krunbox's own groups: a path from a forged record must never be emptied or removed. */
const removable = (dirs: string[]) => dirs.filter((dir) => typeof dir === 'string' && SANDBOX_CGROUP_DIR.test(dir))

function killAll(procs: string): void {
  for (const pid of procs.split('\n')) {
    if (pid) {
      try {
        process.kill(Number(pid), 'SIGKILL')
      } catch {}
    }
  }
}

/** rmdir fails with EBUSY while a killed process is still exiting: retry this often, this long (fsBatch's too). */
const RMDIR_RETRY_MS = 2
const RMDIR_TRIES = 50

/**
 * Kills every process left in krunbox's groups among `dirs` and removes them (leaves first, as
 * listed), in one task of the libuv pool with the reaper's own steps (fsBatch removeCgroup); it
 * took 45 fs/promises calls before.
 */
export async function removeCgroupDirs(dirs: string[]): Promise<void> {
  const ops = removable(dirs).map((dir): FsOp => ({ op: 'removeCgroup', path: dir }))
  if (ops.length > 0) await fsBatch(ops)
}

/** The same, blocking: for the host's exit (no event loop left) and the sweep of a new runtime. */
export function removeCgroupDirsSync(dirs: string[]): void {
  for (const dir of removable(dirs)) {
    try {
      killAll(fs.readFileSync(path.join(dir, 'cgroup.procs'), 'utf8'))
    } catch {}
    for (let i = 0; i < RMDIR_TRIES; i++) {
      try {
        fs.rmdirSync(dir)
        break
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EBUSY') break
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, RMDIR_RETRY_MS)
      }
    }
  }
}
