/**
 * One run of a context's bridge (lib/code/bridge/code_bridge.py): a long-lived command of the
 * sandbox, started as the context's uid, whose stdin takes requests and whose stdout brings the
 * kernel's messages. It ends when the kernel dies, when it is stopped, or with the sandbox.
 */
import { PassThrough } from 'node:stream'
import type { Command, CommandResult } from '../command.js'
import { CODE_KERNEL_START_MS, CODE_OUTPUT_BYTES, RETAIN_BYTES } from '../defaults.js'
import { SandboxError } from '../errors.js'
import type { StartOptions } from '../exec-options.js'
import { errors } from '../protocol/errors.gen.js'
import { BoundedLines, parseBridgeLine, type BridgeMessage } from './bridge-lines.js'
import { ERROR_RESERVE_BYTES, type ExecutionRecorder } from './execution.js'
import type { CodeLanguage } from './types.js'

/** What a bridge needs of its sandbox. */
export interface KernelSandbox {
  readonly image: string
  start(command: string, args: string[], options: StartOptions): Command
}

export interface KernelLaunch {
  language: CodeLanguage
  contextId: string
  bridgePath: string
  uid: number
  cwd: string | undefined
  env: Record<string, string>
}

/** How a cell's run on the bridge ended. */
export type CellOutcome = { kind: 'done' } | { kind: 'died'; problem: string }

/** A line outside any execution (ready, fatal, died) is small. */
const CONTROL_LINE_BYTES = 64 * 1024
/** Bytes of the bridge's stderr kept for an error message. */
const STDERR_TAIL_BYTES = 4096
/** The image that has every kernel (lib/images/presets.ts). */
export const KERNEL_IMAGE = 'code-interpreter'

export class KernelProcess {
  /** Resolves once the kernel answered; rejects with S224 (or the start's own error) when it cannot run. */
  readonly ready: Promise<void>
  /** Resolves when the bridge has ended (never rejects). */
  readonly exited: Promise<void>
  pid: number | null = null
  #cmd: Command
  #stdin = new PassThrough()
  #lines: BoundedLines
  #stderr = Buffer.alloc(0)
  #isReady = false
  #ended = false
  #diedReason: string | null = null
  #settleReady!: (err: SandboxError | null) => void
  #cell: { recorder: ExecutionRecorder; settle: (o: CellOutcome) => void } | null = null

  constructor(
    sandbox: KernelSandbox,
    private readonly launch: KernelLaunch,
  ) {
    this.ready = new Promise<void>((resolve, reject) => {
      this.#settleReady = (err) => (err ? reject(err) : resolve())
    })
    this.ready.catch(() => {})
    this.#lines = new BoundedLines(
      () => this.#cell?.recorder.lineLimit() ?? CONTROL_LINE_BYTES,
      (line) => this.#onLine(line),
      (bytes) => this.#cell?.recorder.droppedLine(bytes),
    )
    const config = {
      language: launch.language,
      maxMessageBytes: CODE_OUTPUT_BYTES.max + ERROR_RESERVE_BYTES,
      errorReserveBytes: ERROR_RESERVE_BYTES,
    }
    // Throws at once on what start() refuses (env, cwd, a stopped sandbox): the caller's error.
    this.#cmd = sandbox.start('python3', [launch.bridgePath, JSON.stringify(config)], {
      cwd: launch.cwd,
      env: launch.env,
      user: `${launch.uid}:${launch.uid}`,
      stdin: this.#stdin,
      retainBytes: RETAIN_BYTES.min,
    })
    this.#cmd.on('stdout', (data) => this.#lines.push(data))
    this.#cmd.on('stderr', (data) => {
      const kept = Buffer.concat([this.#stderr, data])
      this.#stderr = kept.subarray(Math.max(0, kept.length - STDERR_TAIL_BYTES))
    })
    const startTimer = setTimeout(() => {
      this.#failStart(`it did not answer within ${CODE_KERNEL_START_MS} ms`)
      void this.kill()
    }, CODE_KERNEL_START_MS)
    startTimer.unref()
    void this.ready.then(
      () => clearTimeout(startTimer),
      () => clearTimeout(startTimer),
    )
    this.exited = this.#cmd.wait().then(
      (result) => this.#onExit(result, null),
      (err: SandboxError) => this.#onExit(null, err),
    )
  }

  get alive(): boolean {
    return !this.#ended && this.#diedReason === null
  }

  /** Runs one cell; resolves when the kernel is done with it or has died. One at a time. */
  execute(code: string, recorder: ExecutionRecorder): Promise<CellOutcome> {
    if (!this.alive) return Promise.resolve({ kind: 'died', problem: this.#diedReason ?? 'has ended' })
    return new Promise((settle) => {
      this.#cell = { recorder, settle }
      this.#send({ op: 'execute', id: recorder.id, code, maxBytes: recorder.caps.maxBytes })
    })
  }

  /** SIGINT to the kernel (KeyboardInterrupt in Python). */
  interrupt(): void {
    this.#send({ op: 'interrupt' })
  }

  /** Ends the bridge at once (SIGKILL to its group; the kernel dies with it). */
  async kill(): Promise<void> {
    if (this.#ended) return
    await this.#cmd.cancel({ mode: 'force' }).catch(() => {})
  }

  /** Asks the bridge to stop its kernel and exit; ends it after graceMs. */
  async stop(graceMs: number): Promise<void> {
    if (this.#ended) return
    this.#send({ op: 'shutdown' })
    this.#stdin.end()
    let timer: NodeJS.Timeout | undefined
    const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), graceMs)))
    const outcome = await Promise.race([this.exited, late])
    clearTimeout(timer)
    if (outcome === 'late') {
      await this.kill()
      await this.exited
    }
  }

  #send(request: Record<string, unknown>): void {
    if (this.#ended || this.#stdin.writableEnded) return
    this.#stdin.write(JSON.stringify(request) + '\n')
  }

  #onLine(line: Buffer): void {
    const msg = parseBridgeLine(line)
    if (msg === null) return
    this.#onMessage(msg, line.length + 1)
  }

  #onMessage(msg: BridgeMessage, bytes: number): void {
    switch (msg.t) {
      case 'ready':
        if (this.#isReady) return
        this.#isReady = true
        this.pid = msg.pid
        this.#settleReady(null)
        return
      case 'fatal':
        this.#failStart(msg.reason)
        return
      case 'died':
        this.#diedReason = msg.exitCode === null ? 'died' : `died (${exitDescription(msg.exitCode)})`
        this.#endCell({ kind: 'died', problem: this.#diedReason })
        return
      case 'done': {
        const cell = this.#cell
        if (cell === null || msg.id !== cell.recorder.id) return
        cell.recorder.accept(msg, bytes)
        this.#endCell({ kind: 'done' })
        return
      }
      default: {
        // Output of another id is stale or forged: not this execution's.
        const cell = this.#cell
        if (cell !== null && msg.id === cell.recorder.id) cell.recorder.accept(msg, bytes)
      }
    }
  }

  #endCell(outcome: CellOutcome): void {
    const cell = this.#cell
    this.#cell = null
    cell?.settle(outcome)
  }

  #failStart(reason: string): void {
    if (this.#isReady) return
    this.#isReady = true
    this.#settleReady(
      errors.cannotStart({
        program: `the ${this.launch.language} kernel of code context ${this.launch.contextId}`,
        reason: `${reason}${this.#stderrNote()}; the ${KERNEL_IMAGE} image has kernels for Python, JavaScript and TypeScript`,
      }),
    )
  }

  #onExit(result: CommandResult | null, err: SandboxError | null): void {
    this.#ended = true
    this.#stdin.destroy()
    if (!this.#isReady) {
      if (err !== null && err.code !== 'S224') {
        this.#isReady = true
        this.#settleReady(err)
      } else this.#failStart(err ? err.message : `its bridge ended before the kernel answered (${commandEnd(result)})`)
    }
    this.#diedReason ??= err ? `was lost: ${err.message}` : `ended (${commandEnd(result)})`
    this.#endCell({ kind: 'died', problem: this.#diedReason })
  }

  #stderrNote(): string {
    const text = this.#stderr.toString('utf8').trim()
    return text === '' ? '' : ` (its stderr ends: ${text.slice(-1024)})`
  }
}

function exitDescription(code: number): string {
  // Python's Popen reports a signal as a negative code.
  if (code < 0) return `killed by signal ${-code}${-code === 9 ? ', maybe out of memory' : ''}`
  return `exit code ${code}`
}

function commandEnd(result: CommandResult | null): string {
  if (result === null) return 'no result'
  if (result.signal) return `killed by ${result.signal}${result.signal === 'SIGKILL' ? ', maybe out of memory' : ''}`
  return `exit code ${result.exitCode}`
}

export function kernelDied(launch: KernelLaunch, problem: string): SandboxError {
  return errors.kernelDied({ language: launch.language, context: launch.contextId, problem })
}
