/**
 * Spawns and supervises one sandbox process (bwrap or krun-shim) with the native spawner:
 * its own session and process group, joined to its cgroups before exec, a parent-death
 * signal unless detached, no inherited fds but the ones given, stderr to a file (its tail
 * explains boot failures), and stdout as a pipe on which the agent announces READY.
 */
import net from 'node:net'
import { loadNative, type ExitWatch } from '../native.js'
import type { ProcessExit } from './types.js'

export interface SuperviseOptions {
  file: string
  args: string[]
  stderrFile: string
  cgroupJoinFiles: string[]
  dieWithParent: boolean
  env?: Record<string, string>
  /** Become fds 3, 4, … of the child. */
  extraFds?: number[]
  /** Whether the process announces readiness on stdout (bwrap + agent); otherwise stdout is /dev/null. */
  announcesReady?: boolean
  /** Paths bound at dir/0, dir/1, … in a private mount namespace of the child (see native spawn). */
  stagedBinds?: { dir: string; sources: string[] }
  /** Run as root of a new user namespace with these maps, written by the helpers if given (see native spawn). */
  userNamespace?: { uidMap: string; gidMap: string; helpers?: { uid: string; gid: string }; owner?: number }
  /** With userNamespace: what the bounding set keeps (see native spawn). */
  boundingCapabilities?: readonly number[]
  /** PID 1 of a pid namespace of its own: its end kills all it left behind (see native spawn; root only). */
  pidNamespace?: boolean
}

export interface SupervisedProcess {
  pid: number
  exited: Promise<ProcessExit>
  kill(signal: NodeJS.Signals): void
  /** Resolves when the process prints this line on stdout; rejects on exit or after timeoutMs. */
  waitForLine(line: string, timeoutMs: number): Promise<void>
}

/** Resolves once the process has exec'd; the spawn runs off the event loop (native spawnAsync). */
export async function spawnSupervised(options: SuperviseOptions): Promise<SupervisedProcess> {
  const native = loadNative()
  const announcesReady = options.announcesReady ?? true
  const child = await native.spawnAsync({
    file: options.file,
    args: options.args,
    env: Object.entries(options.env ?? {}).map(([k, v]) => `${k}=${v}`),
    stderrFile: options.stderrFile,
    createPipes: { stdout: announcesReady },
    extraFds: options.extraFds,
    newSession: true,
    parentDeathSignal: options.dieWithParent ? 'SIGKILL' : undefined,
    cgroupJoinFiles: options.cgroupJoinFiles,
    stagedBinds: options.stagedBinds,
    userNamespace: options.userNamespace,
    boundingCapabilities: options.boundingCapabilities,
    pidNamespace: options.pidNamespace,
  })
  const pid = child.pid
  let done = false
  let watch: ExitWatch | null = null
  const exited = new Promise<ProcessExit>((resolve) => {
    watch = native.watchExit(pid, (exitCode, signal) => {
      done = true
      resolve({ exitCode, signal })
    })
  })
  const stdout = announcesReady ? new net.Socket({ fd: child.stdoutFd!, readable: true, writable: false }) : null
  stdout?.on('error', () => {})
  return {
    pid,
    exited,
    kill(signal) {
      if (done) return
      // A killed process's end is awaited (a stop, a timeout, a failed boot): the event loop stays
      // alive until it is reported, instead of letting the process exit half-way through that end.
      watch?.ref()
      // Its whole group too (it leads one: newSession). bwrap's child waits on an eventfd for its
      // parent to finish the namespaces' setup, before it has a parent-death signal: the parent
      // killed alone would leave it blocked there for good, holding stdout (and its cgroups).
      native.killGroup(pid, signal)
      native.kill(pid, signal)
    },
    waitForLine(line, timeoutMs) {
      if (!stdout) return Promise.reject(new Error('this process does not announce readiness on stdout'))
      return new Promise((resolve, reject) => {
        let seen = ''
        const timer = setTimeout(
          () => finish(new Error(`no ${line} from the sandbox within ${timeoutMs} ms`)),
          timeoutMs,
        )
        const onData = (chunk: Buffer) => {
          seen += chunk.toString('utf8')
          if (seen.split('\n').includes(line)) finish(null)
        }
        let finished = false
        const finish = (err: Error | null) => {
          if (finished) return
          finished = true
          clearTimeout(timer)
          stdout.removeListener('data', onData)
          // The agent writes nothing after READY; closing our end keeps no fd per sandbox.
          stdout.destroy()
          if (err) reject(err)
          else resolve()
        }
        stdout.on('data', onData)
        // Its exit, not the end of stdout: a process it left behind may still hold the pipe.
        void exited.then((e) =>
          finish(new Error(`sandbox process exited before it was ready (exit code ${e.exitCode}, signal ${e.signal})`)),
        )
      })
    },
  }
}
