/**
 * The native side of krunbox, typed: the N-API addon (build/Release/krunbox.node
 * or prebuilds/<platform>-<arch>/, found by node-gyp-build) and the krun-shim
 * and krunbox-reaper executables that sit next to it (what krun-shim reads and writes:
 * lib/drivers/krun-shim-codec.ts).
 *
 * Errors thrown by the addon carry `.code` (an S-code), `.errno`, `.syscall`
 * and `.path`; every function here rethrows them as SandboxError by code.
 *
 * Using the file descriptors the addon returns (spawn's stdin/stdout/stderr
 * pipes, pipe()): they are close-on-exec and blocking.
 *  - Wrap pipe ends in `new net.Socket({ fd, readable: true, writable: false })`
 *    (or `{ readable: false, writable: true }` for a write end). libuv switches
 *    the fd to non-blocking and reads on the event loop; `'end'` fires at EOF;
 *    `destroy()` closes the fd.
 *  - Do NOT use fs.createReadStream/fs.read on a pipe: each pending read holds
 *    one of the four libuv threadpool threads until data arrives.
 *  - Small one-shot writes (a config under 64 KiB into a fresh pipe) can use
 *    fs.writeSync(fd, data) followed by fs.closeSync(fd).
 *  - An fd that is never wrapped must be closed with fs.closeSync.
 */
import { constants as osConstants } from 'node:os'
import { dirname, join } from 'node:path'
import { createRequire } from 'node:module'
import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

import { SandboxError } from './errors.js'
import { errors } from './protocol/errors.gen.js'

// ---------------------------------------------------------------------------
// Types of the addon's exports
// ---------------------------------------------------------------------------

export interface HostProbe {
  /** uname machine, e.g. 'x86_64', 'aarch64' */
  arch: string
  kvm: {
    devicePresent: boolean
    /** open('/dev/kvm', O_RDWR) works for this process */
    accessible: boolean
    /** vmx or svm in /proc/cpuinfo (outside x86: true when /dev/kvm exists) */
    hardwareVirt: boolean
    /** the KVM vendor module: 'kvm_intel' | 'kvm_amd' | 'kvm_pvm' | …, or null */
    backend: string | null
    /** backend emulates instead of using VMX/SVM (kvm_pvm): guests cannot boot */
    softwareBackend: boolean
    /** every kvm* name in /proc/modules and /sys/module */
    modules: string[]
    /** accessible && hardwareVirt && !softwareBackend */
    usable: boolean
  }
  libkrun: {
    loadable: boolean
    /** the soname or override that was tried */
    path: string
    /** the file the loader picked, when loadable */
    resolvedPath: string | null
    /** from the file name (libkrun.so.1.17.0 → '1.17.0'); libkrun has no version call */
    version: string | null
    /** dlerror() text when not loadable */
    error: string | null
    /** symbols krun-shim calls that the library lacks (hostProbe() only; [] from the native probe) */
    missingSymbols: string[]
    /** the oldest libkrun krunbox accepts (every symbol krun-shim calls, and no known stall) */
    minimumVersion: string
    /** built with its init blob (/init.krun): krun_has_feature(KRUN_FEATURE_INIT_BLOB); null: unknown (before 1.19, always built in) */
    initBlob?: boolean | null
  }
  /** libkrunfw.so.5 loaded BY NAME, as libkrun loads it */
  libkrunfw: { loadable: boolean; path: string; error: string | null }
  bubblewrap: { path: string | null; version: string | null }
  cgroup: {
    /** 'none' when no cgroup filesystem is mounted */
    mode: 'v1' | 'v2' | 'hybrid' | 'none'
    /** every controller below is present and its root passes access(W_OK) */
    writable: boolean
    controllers: Record<'memory' | 'pids' | 'cpu' | 'freezer', CgroupControllerProbe | null>
  }
  userns: {
    unprivilegedAllowed: boolean
    /** the sysctl that forbids it, e.g. '/proc/sys/user/max_user_namespaces = 0' */
    blockedBy: string | null
  }
  /** the first missing piece for the krun engine, in words; null when krun can run */
  krunUnavailableReason: string | null
}

export interface CgroupControllerProbe {
  version: 1 | 2
  /** mount point (v1) or the cgroup2 mount (v2) */
  path: string
  writable: boolean
}

export interface ProbeOptions {
  /** dlopen() name or path of libkrun; default 'libkrun.so.1' */
  libkrunPath?: string
  /** the bwrap to report on; default the first `bwrap` on PATH */
  bubblewrapPath?: string
}

export interface SpawnOptions {
  /** program; without a '/', searched in PATH from `env` (else this process's PATH) */
  file: string
  /** arguments after the program name */
  args?: readonly string[]
  /** argv[0]; default `file` */
  argv0?: string
  /** the complete environment as KEY=VALUE; default: this process's environment */
  env?: readonly string[]
  cwd?: string
  /** fds for the child's 0, 1, 2; null/missing → /dev/null */
  stdio?: readonly [number | null, number | null, number | null] | readonly (number | null)[]
  /** become the child's fds 3, 4, … in order (at most 64) */
  extraFds?: readonly number[]
  /** setsid(): new session (and group). Default false. */
  newSession?: boolean
  /** setpgid(0, 0). Default true unless newSession; the child always leads its own group. */
  processGroup?: boolean
  /**
   * CLONE_NEWPID: the child is PID 1 of a pid namespace of its own, so its end kills every
   * process it left in it, whatever their session or group. Needs CAP_SYS_ADMIN (root).
   */
  pidNamespace?: boolean
  /**
   * PR_SET_PDEATHSIG: signal the child receives when its parent dies. Linux sends
   * it when the *thread* that forked exits: call spawn() from the main thread, not
   * from a worker that may end before the child should (spawnAsync forks on a libuv
   * pool thread, which lives as long as the process).
   */
  parentDeathSignal?: number | NodeJS.Signals
  /** A file the child's stderr is appended to (created 0600, never through a link), opened by the launch itself; not with stdio[2]. */
  stderrFile?: string
  /** cgroup files the child joins before exec by writing "0" (itself) into them: cgroup.procs, or v1 `tasks` (see native spawn) */
  cgroupJoinFiles?: readonly string[]
  /** create pipes for these stdio slots (their `stdio` entry must be null) */
  createPipes?: { stdin?: boolean; stdout?: boolean; stderr?: boolean }
  /**
   * Run the child as uid/gid 0 of a new user namespace with these maps (kernel map text,
   * "inside outside count" lines), written by this process after the child joined its
   * cgroups. Mapping ids other than one's own needs root, or `helpers`: the absolute paths of
   * newuidmap and newgidmap, run as `<helper> <pid> <map numbers>` (a failure is S304 naming the
   * command, its status and its stderr). `owner` (root only): the host uid the child becomes
   * before it makes the namespace, which then owns it; the kernel charges the namespace's
   * per-user budgets (inotify, processes, message queues) to that uid too, not to root.
   */
  userNamespace?: { uidMap: string; gidMap: string; helpers?: { uid: string; gid: string }; owner?: number }
  /**
   * With userNamespace: the capabilities (numbers, see capabilities(7)) left in the child's
   * bounding set there; every other one is dropped before exec, so what it execs can never hold it.
   */
  boundingCapabilities?: readonly number[]
  /**
   * Before the ids change: a private mount namespace with a tmpfs on `dir` and each source
   * bound at `dir/<index>`, reachable whatever the permissions on the way to the sources.
   */
  stagedBinds?: { dir: string; sources: readonly string[] }
}

export interface SpawnResult {
  pid: number
  /** parent ends of the pipes asked for in createPipes (close-on-exec) */
  stdinFd?: number
  stdoutFd?: number
  stderrFd?: number
}

/** A child's end: exactly one of exitCode and signal is set, or both are null when the status was lost. */
export interface ExitStatus {
  exitCode: number | null
  signal: NodeJS.Signals | null
}

export interface ExitWatch {
  /** keep the event loop alive until the child exits */
  ref(): void
  unref(): void
}

export interface WatchExitOptions {
  /** keep the event loop alive while the child runs; default false */
  ref?: boolean
}

/** The raw addon. C signatures of the system calls each wraps are noted above each entry. */
interface NativeBinding {
  // open("/dev/kvm"), /proc/cpuinfo, /sys/module, dlopen(libkrun, libkrunfw), posix_spawn(bwrap --version)
  probe(options?: ProbeOptions): HostProbe
  // pipe2(O_CLOEXEC); fork(); setsid|setpgid; prctl(PR_SET_PDEATHSIG); write(cgroup.procs); dup2; close_range(CLOEXEC); execve
  spawn(options: Omit<SpawnOptions, 'parentDeathSignal'> & { parentDeathSignal?: number }): SpawnResult
  // the same, with fork, the child's set-up and its wait on a libuv pool thread
  spawnAsync(options: Omit<SpawnOptions, 'parentDeathSignal'> & { parentDeathSignal?: number }): Promise<SpawnResult>
  // pipe2(O_CLOEXEC)
  pipe(): { readFd: number; writeFd: number }
  // one poller thread for all children: pidfd_open + epoll, then waitid(P_PID, WEXITED|WNOWAIT) and waitpid(); ThreadSafeFunction back to JS
  watchExit(
    pid: number,
    callback: (exitCode: number | null, signal: NodeJS.Signals | null) => void,
    options?: WatchExitOptions,
  ): ExitWatch
  // kill(pid, sig)
  kill(pid: number, signal: number): boolean
  // kill(-pgid, sig)
  killGroup(pgid: number, signal: number): boolean
  // per file: open(O_CREAT|O_EXCL|O_NOFOLLOW), write, fchown, fchmod, futimens, close; one libuv pool task per batch
  writeFiles(files: FileToWrite[]): Promise<void>
  fsBatch(ops: FsOp[]): Promise<number[]>
  // socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_STREAM, SOCK_CLOEXEC)
  socketPair(kind: 'seqpacket' | 'stream'): [number, number]
  // poll + recvmsg(MSG_CMSG_CLOEXEC) of one fd, then fstat/getsockopt/getsockname; on the libuv pool
  receiveListener(channelFd: number, port: number, timeoutMs: number): Promise<number>
  // sendmsg(SCM_RIGHTS, MSG_DONTWAIT)
  sendFd(channelFd: number, fd: number, bytes: Buffer): void
  // socket(AF_UNIX, SOCK_STREAM); connect; sendmsg(SCM_RIGHTS); close
  sendFdTo(path: string, fd: number, bytes: Buffer): void
  // poll + accept4 + recvmsg(MSG_CMSG_CLOEXEC); on the libuv pool
  acceptFd(listenFd: number, timeoutMs: number): Promise<{ fd: number; data: Buffer } | null>
}

// ---------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------

const requireNative = createRequire(import.meta.url)

/** The package root: the nearest directory above this file holding binding.gyp (null: none, krunbox was bundled). */
function findPackageRoot(): string | null {
  let dir = dirname(fileURLToPath(import.meta.url))
  for (;;) {
    if (existsSync(join(dir, 'binding.gyp'))) return dir
    const parent = dirname(dir)
    if (parent === dir) return null
    dir = parent
  }
}

function packageRoot(): string {
  return findPackageRoot() ?? dirname(dirname(fileURLToPath(import.meta.url)))
}

/** A bundler (esbuild, webpack) copied krunbox's code out of its package, away from its addon and helpers. */
function bundledAdvice(): string {
  if (findPackageRoot() !== null) return ''
  return (
    `krunbox was loaded from ${fileURLToPath(import.meta.url)}, outside its package (bundled?): mark it external ` +
    '(esbuild --external:krunbox, webpack externals) so it loads from node_modules/krunbox with its addon. Otherwise '
  )
}

let loaded: { binding: NativeBinding; addonPath: string } | undefined

function load(): { binding: NativeBinding; addonPath: string } {
  if (loaded) return loaded
  const root = packageRoot()
  let addonPath: string
  try {
    const nodeGypBuild = requireNative('node-gyp-build') as { resolve(dir: string): string }
    addonPath = nodeGypBuild.resolve(root)
  } catch (err) {
    throw errors.binaryMissing(
      {
        subject: 'the krunbox native addon',
        problem:
          `is not built for ${process.platform}-${process.arch} (looked in ${join(root, 'build/Release')} ` +
          `and ${join(root, 'prebuilds')}; prebuilds exist for linux-x64 and linux-arm64 with glibc). ` +
          `Fix: ${bundledAdvice()}install a C++ compiler, make and python3 (Debian/Ubuntu: apt-get install g++ make python3; Alpine: apk add g++ make python3 linux-headers) ` +
          `and run "npm rebuild krunbox"`,
      },
      { cause: err },
    )
  }
  try {
    loaded = { binding: requireNative(addonPath) as NativeBinding, addonPath }
  } catch (err) {
    throw errors.binaryMissing(
      { subject: `the krunbox native addon at ${addonPath}`, problem: `failed to load: ${(err as Error).message}` },
      { cause: err },
    )
  }
  return loaded
}

/** Absolute path of the loaded .node file. */
export function nativeAddonPath(): string {
  return load().addonPath
}

/** Absolute path of krun-shim, built next to the addon. Throws S303 when it is missing. */
export function krunShimPath(): string {
  return besideAddon('krun-shim')
}

/** Absolute path of krunbox-reaper (lib/reaper.ts), built next to the addon. Throws S303 when it is missing. */
export function reaperPath(): string {
  return besideAddon('krunbox-reaper')
}

/** Absolute path of krunbox-reset (lib/pool-reset.ts), built next to the addon. Throws S303 when it is missing. */
export function resetHelperPath(): string {
  return besideAddon('krunbox-reset')
}

function besideAddon(name: string): string {
  const path = join(dirname(load().addonPath), name)
  if (!existsSync(path)) {
    throw errors.binaryMissing({
      subject: name,
      problem: `is missing at ${path}. Fix: run "npm rebuild krunbox" (needs a C compiler) or reinstall krunbox`,
    })
  }
  return path
}

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

const errnoNames = new Map<number, string>(Object.entries(osConstants.errno).map(([name, value]) => [value, name]))

export function errnoName(errno: number): string | undefined {
  return errnoNames.get(errno)
}

/** Native error (with .code) → SandboxError, by code. Anything else is S500. */
function toSandboxError(err: unknown): SandboxError {
  if (err instanceof SandboxError) return err
  const e = err as { code?: unknown; message?: unknown; errno?: unknown; syscall?: unknown; path?: unknown }
  const message = typeof e?.message === 'string' ? e.message : String(err)
  const details: Record<string, unknown> = {}
  if (typeof e?.errno === 'number') {
    details.errno = e.errno
    details.errnoName = errnoName(e.errno)
  }
  if (typeof e?.syscall === 'string') details.syscall = e.syscall
  if (typeof e?.path === 'string') details.path = e.path
  const code = typeof e?.code === 'string' && /^S\d{3}$/.test(e.code) ? e.code : 'S500'
  return SandboxError.fromCode(code, message, { cause: err, details })
}

function call<T>(fn: (binding: NativeBinding) => T): T {
  const binding = load().binding
  try {
    return fn(binding)
  } catch (err) {
    throw toSandboxError(err)
  }
}

/** call() for a binding that answers with a promise: its rejection is coded too. */
async function callAsync<T>(fn: (binding: NativeBinding) => Promise<T>): Promise<T> {
  try {
    return await call(fn)
  } catch (err) {
    throw toSandboxError(err)
  }
}

/** 'SIGTERM' or 15 → 15. Throws S001 for unknown names and out-of-range numbers. */
export function signalNumber(signal: number | string, what = 'signal'): number {
  if (typeof signal === 'number') {
    if (Number.isInteger(signal) && signal >= 0 && signal <= 64) return signal
  } else if (typeof signal === 'string' && Object.hasOwn(osConstants.signals, signal)) {
    return osConstants.signals[signal as NodeJS.Signals]
  }
  throw errors.badArgument({
    subject: `${what}`,
    problem: `must be a signal name like 'SIGTERM' or a number 0..64, got ${JSON.stringify(signal)}`,
  })
}

// ---------------------------------------------------------------------------
// The API
// ---------------------------------------------------------------------------

/** Everything the engines need from this host; synchronous, a few milliseconds. */
export function probe(options: ProbeOptions = {}): HostProbe {
  return call((b) => b.probe(options))
}

/**
 * Starts a process in its own process group (or session) and returns once it
 * has exec'd. Failures before exec (ENOENT, EACCES, bad cwd, cgroup write) throw
 * S304 with details.errno/errnoName/syscall/path. Every fd other than stdio and
 * extraFds is closed in the child. Call watchExit(pid) to reap it.
 */
export function spawn(options: SpawnOptions): SpawnResult {
  const native = nativeSpawnOptions(options)
  return call((b) => b.spawn(native))
}

/**
 * spawn() without blocking the event loop: the fork, the child's cgroup joins and id maps,
 * and the wait for its exec run on a libuv pool thread. Options are checked at once (a bad
 * one rejects before anything starts). The fds given in stdio and extraFds must stay open
 * until the promise settles.
 */
export async function spawnAsync(options: SpawnOptions): Promise<SpawnResult> {
  const native = nativeSpawnOptions(options)
  return callAsync((b) => b.spawnAsync(native))
}

function nativeSpawnOptions(
  options: SpawnOptions,
): Omit<SpawnOptions, 'parentDeathSignal'> & { parentDeathSignal?: number } {
  if (typeof options !== 'object' || options === null)
    throw errors.badArgument({
      subject: 'spawn: options',
      problem: `must be an object, got ${options === null ? 'null' : typeof options}`,
    })
  const { parentDeathSignal, ...rest } = options
  return parentDeathSignal === undefined
    ? rest
    : { ...rest, parentDeathSignal: signalNumber(parentDeathSignal, 'spawn: options.parentDeathSignal') }
}

/** A new file for writeFiles(): uid/gid left as the writer's when absent, mtime when absent. */
export interface FileToWrite {
  path: string
  data: Buffer
  mode: number
  uid?: number
  gid?: number
  mtimeMs?: number
}

/**
 * Creates the files, in order, in one task on the libuv pool: each is new (an existing path or
 * a link there fails) and gets its content, owner, mode and mtime. Stops at the first failure,
 * which rejects naming its path and system call. The buffers must not change until it settles.
 */
export async function writeFiles(files: FileToWrite[]): Promise<void> {
  return callAsync((b) => b.writeFiles(files))
}

/** One call of fsBatch(): every path absolute, never followed at its last component if a link. */
export type FsOp =
  | { op: 'mkdir'; path: string; mode?: number; existOk?: boolean }
  | { op: 'write'; path: string; data: string }
  | { op: 'open'; path: string; flags: 'r' | 'w' }
  /** A unix socket listening at `path` (made new; never over an existing file), the file 0600 and owned by uid/gid when given. */
  | { op: 'listen'; path: string; uid?: number; gid?: number }
  /** Best effort, never fails: the cgroup tree's processes SIGKILLed, its directories removed bottom-up, retried every 2 ms (up to 100 ms) while they leave. */
  | { op: 'removeCgroup'; path: string }
  /** Best effort, never fails: the directory and all under it, never through a link nor into another filesystem. */
  | { op: 'removeTree'; path: string }

/**
 * Runs the calls in order in one task on the libuv pool (each fs/promises call is a task of its
 * own, and waking a pool thread is what costs the main thread): mkdir, write a small file that
 * exists, open, listen. Resolves with the fds the opens and listens made, close-on-exec, in order. Stops at the first
 * failure, closing those fds, and rejects naming its path and system call.
 */
export async function fsBatch(ops: FsOp[]): Promise<number[]> {
  return callAsync((b) => b.fsBatch(ops))
}

/** A unix socket pair, both ends close-on-exec (fd_passing.h). */
export function socketPair(kind: 'seqpacket' | 'stream'): [number, number] {
  return call((b) => b.socketPair(kind))
}

/**
 * The one socket the peer of `channelFd` sends within `timeoutMs`, kept only if it is an IPv4
 * TCP socket listening on 127.0.0.1:`port`; anything else is closed and the promise rejects.
 */
export async function receiveListener(channelFd: number, port: number, timeoutMs: number): Promise<number> {
  return callAsync((b) => b.receiveListener(channelFd, port, timeoutMs))
}

/** Sends `bytes` and a copy of `fd` over `channelFd` in one message, never waiting (EAGAIN when the peer does not read). */
export function sendFd(channelFd: number, fd: number, bytes: Buffer): void {
  call((b) => b.sendFd(channelFd, fd, bytes))
}

/** Connects to the unix socket at `path`, sends `bytes` and a copy of `fd` in one message, and closes the connection. */
export function sendFdTo(path: string, fd: number, bytes: Buffer): void {
  call((b) => b.sendFdTo(path, fd, bytes))
}

/**
 * The next connection on the unix listener `listenFd` (fsBatch's listen) that carries one socket:
 * the bytes of its first message and the socket; null when none came within `timeoutMs`.
 */
export async function acceptFd(listenFd: number, timeoutMs: number): Promise<{ fd: number; data: Buffer } | null> {
  return callAsync((b) => b.acceptFd(listenFd, timeoutMs))
}

/** A pipe, both ends close-on-exec: pass one end to spawn() via stdio or extraFds. */
export function pipe(): { readFd: number; writeFd: number } {
  return call((b) => b.pipe())
}

/**
 * Reaps `pid` (a child from spawn()) from the addon's one poller thread (a thread of
 * its own on kernels without pidfds) and calls back once
 * with its exit code or terminating signal. Does not keep the event loop alive
 * unless { ref: true } or handle.ref(). One watcher per pid; every spawned
 * child needs one, or it stays a zombie.
 */
export function watchExit(
  pid: number,
  callback: (exitCode: number | null, signal: NodeJS.Signals | null) => void,
  options: WatchExitOptions = {},
): ExitWatch {
  return call((b) => b.watchExit(pid, callback, options))
}

/** watchExit as a promise; keeps the event loop alive until the child exits unless ref is false. */
export function waitForExit(pid: number, options: WatchExitOptions = { ref: true }): Promise<ExitStatus> {
  return new Promise((resolve) => {
    watchExit(pid, (exitCode, signal) => resolve({ exitCode, signal }), options)
  })
}

/** Signals one process. False if it no longer exists (or is a child of ours that already exited). */
export function kill(pid: number, signal: number | NodeJS.Signals = 'SIGTERM'): boolean {
  const sig = signalNumber(signal, 'kill: signal')
  return call((b) => b.kill(pid, sig))
}

/** Signals a whole process group (pgid = the pid of a child from spawn()). False if the group is gone. */
export function killGroup(pgid: number, signal: number | NodeJS.Signals = 'SIGTERM'): boolean {
  const sig = signalNumber(signal, 'killGroup: signal')
  return call((b) => b.killGroup(pgid, sig))
}

/** The functions above as one object, for callers that want the addon loaded up front. */
export interface NativeApi {
  probe: typeof probe
  spawn: typeof spawn
  spawnAsync: typeof spawnAsync
  pipe: typeof pipe
  watchExit: typeof watchExit
  waitForExit: typeof waitForExit
  kill: typeof kill
  killGroup: typeof killGroup
  krunShimPath: typeof krunShimPath
  nativeAddonPath: typeof nativeAddonPath
}

/** Loads the addon now (S303 if it is missing or broken) and returns the typed API. */
export function loadNative(): NativeApi {
  load()
  return { probe, spawn, spawnAsync, pipe, watchExit, waitForExit, kill, killGroup, krunShimPath, nativeAddonPath }
}
