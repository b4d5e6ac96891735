/** Running the external tools a build needs (mmdebstrap, tar, cp, bwrap). */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { findExecutable } from '../paths.js'

export interface RunOptions {
  cwd?: string
  env?: NodeJS.ProcessEnv
  /** Called with each line the tool writes to stdout or stderr. */
  onLine?: (line: string) => void
  /**
   * Kill the tool (and, as root, every process it started) if this process dies, so a
   * SIGKILLed build leaves nothing behind that still writes into its directory.
   */
  dieWithParent?: boolean
  /** Kills the tool (its whole tree, with dieWithParent as root) when aborted; the result then says SIGKILL. */
  signal?: AbortSignal
  /** 'pipe': the tool's stdin stays open until the caller ends it (onSpawn gives the child). Default: none. */
  stdin?: 'pipe'
  /** Called once the tool is started: its process (the guard's first, with dieWithParent). */
  onSpawn?: (child: ChildProcess) => void
}

export interface RunResult {
  code: number | null
  signal: NodeJS.Signals | null
  /** The last lines of combined output, for error messages. */
  tail: string
}

const TAIL_LINES = 25

let pidNamespaceWorks: boolean | undefined

/** Root in a container without CAP_SYS_ADMIN cannot create PID namespaces: probe once. */
function pidNamespaceUsable(unshare: string): boolean {
  if (pidNamespaceWorks === undefined) {
    const probe = spawnSync(unshare, ['--pid', '--fork', '--kill-child=SIGKILL', '--', 'true'], {
      stdio: 'ignore',
      timeout: 10_000,
    })
    pidNamespaceWorks = probe.status === 0
  }
  return pidNamespaceWorks
}

/** Wraps argv so the process tree dies with us: setpriv's parent-death signal, plus a PID namespace as root. */
function guardArgv(argv: string[]): string[] {
  const setpriv = findExecutable('setpriv')
  const unshare = findExecutable('unshare')
  let guarded = argv
  if (process.getuid?.() === 0 && unshare !== null && pidNamespaceUsable(unshare)) {
    // Killing the namespace's first process kills everything in the namespace.
    guarded = [unshare, '--pid', '--fork', '--kill-child=SIGKILL', '--', ...guarded]
  }
  if (setpriv !== null) guarded = [setpriv, '--pdeathsig', 'KILL', '--', ...guarded]
  return guarded
}

export function run(command: string, args: string[], options: RunOptions = {}): Promise<RunResult> {
  const argv = options.dieWithParent ? guardArgv([command, ...args]) : [command, ...args]
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0], argv.slice(1), {
      cwd: options.cwd,
      env: options.env ?? process.env,
      stdio: [options.stdin ?? 'ignore', 'pipe', 'pipe'],
    })
    child.stdin?.on('error', () => {})
    options.onSpawn?.(child)
    const tail: string[] = []
    const onText = (() => {
      const partial = { out: '', err: '' }
      return (key: 'out' | 'err', chunk: Buffer, flush = false) => {
        const lines = (partial[key] + chunk.toString('utf8')).split('\n')
        partial[key] = flush ? '' : (lines.pop() ?? '')
        for (const line of lines) {
          if (line === '' && flush) continue
          tail.push(line)
          if (tail.length > TAIL_LINES) tail.shift()
          options.onLine?.(line)
        }
      }
    })()
    const kill = () => child.kill('SIGKILL')
    if (options.signal?.aborted) kill()
    options.signal?.addEventListener('abort', kill, { once: true })
    child.once('close', () => options.signal?.removeEventListener('abort', kill))
    child.stdout?.on('data', (c: Buffer) => onText('out', c))
    child.stderr?.on('data', (c: Buffer) => onText('err', c))
    child.on('error', reject)
    child.on('close', (code, signal) => {
      onText('out', Buffer.alloc(0), true)
      onText('err', Buffer.alloc(0), true)
      resolve({ code, signal, tail: tail.join('\n') })
    })
  })
}
