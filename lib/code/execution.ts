/**
 * One cell's execution as the host builds it from the bridge's messages: results, logs and the
 * error, each counted against the execution's caps (bytes and messages) before it is kept or
 * handed to a listener. What passes a cap is dropped and only counted, so a cell cannot make the
 * host hold more than its caps, whatever it prints or displays.
 */
import type { BridgeMessage } from './bridge-lines.js'
import { executionError, resultFromBundle } from './result.js'
import type { CodeEvent, Execution, ExecutionError, OutputTruncation, CodeResult } from './types.js'

export interface ExecutionCaps {
  maxBytes: number
  maxMessages: number
}

/** The cell's error may pass maxBytes by this much: a cell that printed up to its cap still says how it ended. */
export const ERROR_RESERVE_BYTES = 1024 * 1024

export interface ExecutionListeners {
  onStdout?: (text: string) => void
  onStderr?: (text: string) => void
  onResult?: (result: CodeResult) => void
  onError?: (error: ExecutionError) => void
  /** Every output as an event (runCodeStream). */
  onEvent?: (event: CodeEvent) => void
}

export class ExecutionRecorder {
  readonly results: CodeResult[] = []
  readonly logs = { stdout: [] as string[], stderr: [] as string[] }
  error: ExecutionError | null = null
  executionCount: number | null = null
  #bytes = 0
  #messages = 0
  #truncation: OutputTruncation | null = null
  readonly #started = performance.now()

  constructor(
    readonly id: string,
    readonly caps: ExecutionCaps,
    private readonly listeners: ExecutionListeners,
  ) {}

  /** The longest line this execution may still take (its remaining bytes, and the error's reserve). */
  lineLimit(): number {
    return Math.max(0, this.caps.maxBytes - this.#bytes) + ERROR_RESERVE_BYTES
  }

  /** A line too long to be read at all: it counts as dropped output. */
  droppedLine(bytes: number): void {
    this.#drop('maxOutputBytes', 1, bytes)
  }

  /** An output message of this execution, `bytes` long on the wire. */
  accept(msg: BridgeMessage, bytes: number): void {
    switch (msg.t) {
      case 'stream':
      case 'display':
        if (!this.#admit(bytes, false)) return
        if (msg.t === 'stream') {
          this.logs[msg.name].push(msg.text)
          if (msg.name === 'stdout') this.#tell(() => this.listeners.onStdout?.(msg.text))
          else this.#tell(() => this.listeners.onStderr?.(msg.text))
          this.#tell(() => this.listeners.onEvent?.({ type: msg.name, text: msg.text }))
        } else {
          const result = resultFromBundle(msg.data, msg.main)
          if (msg.main && msg.count !== null) this.executionCount = msg.count
          this.results.push(result)
          this.#tell(() => this.listeners.onResult?.(result))
          this.#tell(() => this.listeners.onEvent?.({ type: 'result', result }))
        }
        return
      case 'error': {
        if (!this.#admit(bytes, true)) return
        const error = executionError(msg.name, msg.value, msg.traceback)
        this.error = error
        this.#tell(() => this.listeners.onError?.(error))
        this.#tell(() => this.listeners.onEvent?.({ type: 'error', error }))
        return
      }
      case 'capped':
        this.#drop('maxOutputBytes', msg.droppedMessages, msg.droppedBytes)
        return
      case 'done':
        if (msg.count !== null) this.executionCount = msg.count
        return
    }
  }

  finish(flags: { timedOut: boolean; kernelRestarted: boolean }): Execution {
    const main = this.results.find((r) => r.isMainResult)
    return {
      results: this.results,
      logs: this.logs,
      error: this.error,
      executionCount: this.executionCount,
      text: main?.text,
      timedOut: flags.timedOut,
      kernelRestarted: flags.kernelRestarted,
      truncated: this.#truncation,
      durationMs: Math.round(performance.now() - this.#started),
    }
  }

  #admit(bytes: number, isError: boolean): boolean {
    // The cell's error passes the message cap and what was dropped before it: it says how the cell ended.
    if (!isError && this.#messages >= this.caps.maxMessages) {
      this.#drop('maxOutputMessages', 1, bytes)
      return false
    }
    const room = this.caps.maxBytes - this.#bytes + (isError ? ERROR_RESERVE_BYTES : 0)
    // Once something was dropped, later outputs are too: what is kept is the first part, in order.
    if ((this.#truncation !== null && !isError) || bytes > room) {
      this.#drop('maxOutputBytes', 1, bytes)
      return false
    }
    this.#bytes += bytes
    this.#messages++
    return true
  }

  #drop(cap: OutputTruncation['cap'], messages: number, bytes: number): void {
    this.#truncation ??= { cap, droppedMessages: 0, droppedBytes: 0 }
    this.#truncation.droppedMessages += messages
    this.#truncation.droppedBytes += bytes
  }

  /** A listener's exception is the caller's, not the execution's: dropped. */
  #tell(call: () => void): void {
    try {
      call()
    } catch {
      // The caller's listener failing is not the cell failing.
    }
  }
}
