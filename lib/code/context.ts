/**
 * A code context: one kernel that keeps its state between cells, run one cell at a time. Its
 * bridge (KernelProcess) is started on first use and again after it died, in which case the
 * next execution says so (kernelRestarted). A timeout or an abort interrupts the cell; a kernel
 * that does not stop within CODE_INTERRUPT_GRACE_MS of the interrupt is ended (S227).
 */
import { randomUUID } from 'node:crypto'
import { CODE_INTERRUPT_GRACE_MS } from '../defaults.js'
import { errors } from '../protocol/errors.gen.js'
import { ExecutionRecorder, type ExecutionCaps, type ExecutionListeners } from './execution.js'
import { KernelProcess, kernelDied, type KernelLaunch, type KernelSandbox } from './kernel-process.js'
import type { CodeContext, Execution } from './types.js'

/** How long (ms) a stopped bridge has to end its kernel and exit before it is killed. */
const STOP_GRACE_MS = 2_000

export interface CellRequest {
  code: string
  caps: ExecutionCaps
  listeners: ExecutionListeners
  timeoutMs: number | null
  signal: AbortSignal | undefined
}

export class KernelContext {
  #process: KernelProcess | null = null
  /** The last kernel died by itself: the next one starts without its state, and says so. */
  #lost = false
  #busy = false
  #removed = false
  /** Cells wait for the one before them. */
  #queue: Promise<unknown> = Promise.resolve()

  constructor(
    private readonly sandbox: KernelSandbox,
    readonly launch: KernelLaunch,
    readonly isDefault: boolean,
  ) {}

  get id(): string {
    return this.launch.contextId
  }

  get removed(): boolean {
    return this.#removed
  }

  info(): CodeContext {
    const p = this.#process
    const state = p === null ? (this.#lost ? 'dead' : 'idle') : !p.alive ? 'dead' : this.#busy ? 'busy' : 'idle'
    return {
      id: this.id,
      language: this.launch.language,
      cwd: this.launch.cwd ?? '',
      uid: this.launch.uid,
      isDefault: this.isDefault,
      state: p !== null && p.alive && !this.#busy && p.pid === null ? 'starting' : state,
    }
  }

  /** Starts the kernel if it does not run; resolves once it answers. Returns whether a dead one was replaced. */
  async ensureStarted(): Promise<boolean> {
    if (this.#removed) throw this.#removedError()
    if (this.#process !== null && this.#process.alive) {
      await this.#process.ready
      return false
    }
    // A process still here but dead ended by itself (its exit may not be seen yet): its state is lost.
    const replaced = this.#lost || this.#process !== null
    const process = new KernelProcess(this.sandbox, this.launch)
    this.#process = process
    void process.exited.then(() => {
      if (this.#process === process && !this.#removed) this.#lost = true
    })
    try {
      await process.ready
    } catch (err) {
      if (this.#process === process) this.#process = null
      // A kernel that never answered had no state to lose.
      this.#lost = replaced
      await process.kill()
      throw err
    }
    this.#lost = false
    return replaced
  }

  /** Runs a cell after those queued before it. */
  run(request: CellRequest): Promise<Execution> {
    const { signal } = request
    if (signal?.aborted) return Promise.reject(aborted(signal))
    let abandon!: (err: unknown) => void
    const gaveUp = new Promise<never>((_, reject) => (abandon = reject))
    const turn = this.#queue.then(() => this.#runNow(request))
    this.#queue = turn.catch(() => {})
    // An abort answers the caller at once; the queue still waits for the kernel to settle.
    const onAbort = () => abandon(aborted(signal!))
    signal?.addEventListener('abort', onAbort, { once: true })
    const answer = Promise.race([turn, gaveUp])
    void answer.then(
      () => signal?.removeEventListener('abort', onAbort),
      () => signal?.removeEventListener('abort', onAbort),
    )
    return answer
  }

  async #runNow(request: CellRequest): Promise<Execution> {
    const { signal } = request
    if (signal?.aborted) throw aborted(signal)
    const kernelRestarted = await this.ensureStarted()
    const process = this.#process!
    const recorder = new ExecutionRecorder(randomUUID(), request.caps, request.listeners)
    let timedOut = false
    let ignoredInterrupt = false
    let graceTimer: NodeJS.Timeout | undefined
    const interrupt = () => {
      if (graceTimer !== undefined) return
      process.interrupt()
      graceTimer = setTimeout(() => {
        ignoredInterrupt = true
        void process.kill()
      }, CODE_INTERRUPT_GRACE_MS)
      graceTimer.unref()
    }
    const deadline =
      request.timeoutMs === null
        ? undefined
        : setTimeout(() => {
            timedOut = true
            interrupt()
          }, request.timeoutMs)
    const onAbort = () => interrupt()
    signal?.addEventListener('abort', onAbort, { once: true })
    this.#busy = true
    try {
      const outcome = await process.execute(request.code, recorder)
      if (outcome.kind === 'died') {
        const problem = ignoredInterrupt
          ? `did not stop within ${CODE_INTERRUPT_GRACE_MS} ms of the interrupt of its ${timedOut ? 'timeout' : 'abort'}, so it was ended`
          : outcome.problem
        throw kernelDied(this.launch, problem)
      }
      if (signal?.aborted) throw aborted(signal)
      return recorder.finish({ timedOut, kernelRestarted })
    } finally {
      this.#busy = false
      clearTimeout(deadline)
      clearTimeout(graceTimer)
      signal?.removeEventListener('abort', onAbort)
    }
  }

  /** A new kernel: the old one's state is gone (an explicit restart is not reported as kernelRestarted). */
  async restart(): Promise<void> {
    if (this.#removed) throw this.#removedError()
    const old = this.#process
    this.#process = null
    await old?.stop(STOP_GRACE_MS)
    this.#lost = false
    await this.ensureStarted()
  }

  /** Stops the kernel; later calls on this context are refused (S001). */
  async remove(): Promise<void> {
    this.#removed = true
    const old = this.#process
    this.#process = null
    await old?.stop(STOP_GRACE_MS)
  }

  #removedError() {
    return errors.badArgument({ subject: `code context ${this.id}`, problem: 'was removed' })
  }
}

function aborted(signal: AbortSignal) {
  return errors.aborted(
    { subject: 'runCode', problem: 'was aborted; the cell was interrupted' },
    { cause: signal.reason },
  )
}
