/**
 * Hands a stopped pool member to its next lease (pool option `reuse`, namespace driver only),
 * in three steps that must all succeed, else the caller destroys the sandbox (fail closed):
 *  1. `sandbox.reset {step: 'lock'}` over a connection of the host's own: the agent takes the next
 *     lease's token and closes every other connection, so the old holder can no longer reach it;
 *  2. krunbox-reset (native/src/reset), from the host's side with the rights the host holds over
 *     the sandbox's namespaces: kills every process of the lease (from where none of them can
 *     signal it), removes its IPC objects and TCP sockets, pivots the sandbox into a fresh root over
 *     the image, and gives the agent back the limits, OOM score and autogroup recorded before the
 *     member's first lease (recordInitState);
 *  3. `sandbox.reset {step: 'reopen'}`: the agent follows the new root, forgets the lease's commands
 *     and starts the member's own lifetime afresh.
 * Step 1 comes first so that nothing the old holder starts can land in the new root.
 */
import crypto from 'node:crypto'
import net from 'node:net'
import { kill, resetHelperPath, spawnAsync, waitForExit } from './native.js'
import { AgentConnection } from './protocol/client.js'

/** How long the helper may take (it waits at most 5 s for the lease's processes to die). */
const HELPER_TIMEOUT_MS = 15_000
/** How long each of the agent's steps may take (reopen waits at most 5 s for the commands' ends). */
const AGENT_STEP_TIMEOUT_MS = 10_000

export interface ResetTarget {
  /** Host pid of the sandbox process (bwrap), whose child is the agent. */
  pid: number
  /** A connection of the host's own, made with the ending lease's token (openSpare, at the lease's start). */
  spare: Promise<AgentConnection>
  /** Host path of the image's root, the new root's lower layer. */
  imageRootfs: string
  /** Size cap of the writable layer, /tmp and /dev/shm (the shape's diskMb). */
  upperMb: number
  /** What recordInitState gave before the member's first lease. */
  initState: string
}

export interface ResetDone {
  connection: AgentConnection
  /** The next lease's access token. */
  token: string
  /** Milliseconds the reset took, all three steps. */
  ms: number
}

/**
 * The reset's connection, opened while the lease runs (it carries no request until the stop), so
 * the reset does not wait for a connect and handshake. Never rejects unhandled.
 */
export function openSpare(socketPath: string, token: string): Promise<AgentConnection> {
  const spare = AgentConnection.connect(socketPath, { token })
  spare.catch(() => {})
  return spare
}

/** The one line krunbox-reset --record prints (native/src/reset/reset_init.c). */
const INIT_STATE = /^limits=[\d:,]+;oom_score_adj=-?\d+;coredump_filter=[\da-f]+;autogroup=(-?\d+|none)\n$/

/**
 * What a lease could change of the agent (its limits, OOM score, coredump filter, autogroup), read
 * from the host's side before the member's first lease, while nothing but the agent has run in it:
 * each reset restores it. pid: the sandbox process's host pid. Rejects when the helper fails.
 */
export async function recordInitState(pid: number): Promise<string> {
  const line = await runHelper(['--record', String(pid)], true)
  if (!INIT_STATE.test(line)) throw new Error(`krunbox-reset --record printed ${JSON.stringify(line.slice(0, 200))}`)
  return line.trimEnd()
}

/** Runs the three steps; rejects (with the connection closed) on the first failure. */
export async function resetSandbox(
  target: ResetTarget,
  tokenChanged: (sha256: string) => Promise<void>,
): Promise<ResetDone> {
  const t0 = performance.now()
  const token = crypto.randomBytes(32).toString('base64url')
  const hash = crypto.createHash('sha256').update(token).digest('hex')
  const connection = await withDeadline(target.spare, 'connect')
  try {
    await withDeadline(connection.call('sandbox.reset', { step: 'lock', tokenSha256: hash }), 'lock')
    // The agent refuses the old token from here on; the host's record (attach's check) follows
    // while the helper runs.
    const args = [String(target.pid), target.imageRootfs, String(target.upperMb), target.initState]
    await Promise.all([tokenChanged(hash), runHelper(args)])
    await withDeadline(connection.call('sandbox.reset', { step: 'reopen' }), 'reopen')
  } catch (err) {
    connection.close()
    throw err
  }
  return { connection, token, ms: performance.now() - t0 }
}

/** A wedged agent must not hold a member (and close()) forever: its reset fails instead. */
function withDeadline<T>(step: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`sandbox.reset ${what} took over ${AGENT_STEP_TIMEOUT_MS} ms`)),
      AGENT_STEP_TIMEOUT_MS,
    )
  })
  step.catch(() => {})
  return Promise.race([step, late]).finally(() => clearTimeout(timer))
}

/**
 * Runs krunbox-reset through the addon's spawn, which shares the host's memory until the exec
 * (child_process's fork copied the page tables of the whole Node process, per reset); resolves
 * with what it printed when `output` (a reset prints nothing: no pipe for it).
 */
async function runHelper(args: string[], output = false): Promise<string> {
  const pipes = { stdout: output, stderr: true }
  const child = await spawnAsync({ file: resetHelperPath(), args, env: [], createPipes: pipes })
  const stdout = output ? firstBytes(child.stdoutFd!) : Promise.resolve('')
  const stderr = firstBytes(child.stderrFd!)
  const timer = setTimeout(() => kill(child.pid, 'SIGKILL'), HELPER_TIMEOUT_MS)
  const status = await waitForExit(child.pid).finally(() => clearTimeout(timer))
  const said = (await stderr).trim()
  if (status.exitCode !== 0)
    throw new Error(`krunbox-reset failed: ${said || (status.signal ?? `exit code ${status.exitCode}`)}`)
  return stdout
}

/** What the helper wrote to fd (its record, its one line of failure), up to 4 KiB, once it closed. */
function firstBytes(fd: number): Promise<string> {
  return new Promise((resolve) => {
    const pipe = new net.Socket({ fd, readable: true, writable: false })
    let text = ''
    pipe.on('data', (chunk: Buffer) => {
      if (text.length < 4096) text += chunk.toString('utf8', 0, 4096 - text.length)
    })
    pipe.on('error', () => {})
    pipe.on('close', () => resolve(text))
  })
}
