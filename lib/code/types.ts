/** The public shapes of the code interpreter: contexts, cells' executions and their results (docs/code-interpreter.md). */

/** The languages a context runs: Python through ipykernel, JavaScript and TypeScript through tslab. */
export type CodeLanguage = 'python' | 'javascript' | 'typescript'

export const CODE_LANGUAGES: readonly CodeLanguage[] = ['python', 'javascript', 'typescript']

/** One output of a cell as its MIME bundle: the cell's value (isMainResult) or a display. */
export interface CodeResult {
  /** True for the cell's value (Jupyter's execute_result), false for a display (display_data). */
  isMainResult: boolean
  /** The formats the bundle holds, by short name: 'text', 'html', 'png', … and the MIME types of `extra`. */
  formats: string[]
  text?: string
  html?: string
  markdown?: string
  svg?: string
  /** The image's bytes (decoded from the bundle's base64). */
  png?: Buffer
  jpeg?: Buffer
  latex?: string
  json?: unknown
  javascript?: string
  /** Every other MIME type of the bundle, as the kernel sent it. */
  extra: Record<string, unknown>
}

/** A cell that raised: an outcome, not an exception of runCode. */
export interface ExecutionError {
  /** The exception's class (`ZeroDivisionError`, `KeyboardInterrupt`, `ReferenceError`). */
  name: string
  value: string
  /** The kernel's traceback, its lines joined with newlines (Python's without colours). */
  traceback: string
}

/** What an execution's output cap dropped (null on an execution under its caps). */
export interface OutputTruncation {
  /** Which cap was passed first. */
  cap: 'maxOutputBytes' | 'maxOutputMessages'
  droppedMessages: number
  droppedBytes: number
}

export interface Execution {
  /** The cell's value and its displays, in the order they came. */
  results: CodeResult[]
  /** What the cell printed, chunk by chunk as the kernel sent it. */
  logs: { stdout: string[]; stderr: string[] }
  /** The exception the cell raised (also a KeyboardInterrupt of a timeout), or null. */
  error: ExecutionError | null
  /** The kernel's execution count for this cell (null when the kernel gave none). */
  executionCount: number | null
  /** The main result's text, when there is one. */
  text: string | undefined
  /** The cell ran past timeoutMs and was interrupted (its kernel and state survive). */
  timedOut: boolean
  /** The context's previous kernel had died: this cell ran on a new kernel, without the old state. */
  kernelRestarted: boolean
  /** The output past the execution's caps was dropped (docs/code-interpreter.md "Caps"). */
  truncated: OutputTruncation | null
  /** The cell's run in ms, from its request to the kernel to its end (a kernel start before it is not counted). */
  durationMs: number
}

/** A context: one kernel, its language, its working directory and environment. */
export interface CodeContext {
  id: string
  language: CodeLanguage
  cwd: string
  /** The uid its kernel runs as inside the sandbox (each context has its own: docs/code-interpreter.md). */
  uid: number
  /** Whether this is its language's default context. */
  isDefault: boolean
  /** `starting`, `idle`, `busy`, or `dead` (its kernel ended: the next call starts a new one). */
  state: 'starting' | 'idle' | 'busy' | 'dead'
}

export interface CreateCodeContextOptions {
  /** Default 'python'. */
  language?: CodeLanguage
  /** The kernel's working directory (default: the sandbox's, usually /workspace). */
  cwd?: string
  /** Environment variables of the kernel, over the sandbox's. */
  env?: Record<string, string>
}

/** What a cell streams while it runs (runCodeStream); the last one is always `end`. */
export type CodeEvent =
  | { type: 'stdout'; text: string }
  | { type: 'stderr'; text: string }
  | { type: 'result'; result: CodeResult }
  | { type: 'error'; error: ExecutionError }
  | { type: 'end'; execution: Execution }

export interface RunCodeOptions {
  /** The language's default context is used (started on first use) unless `context` names one. */
  language?: CodeLanguage
  /** A context from createCodeContext (or its id). */
  context?: CodeContext | string
  /** The cell is interrupted past this (ms; default 300 000; null: no deadline). Its result then has timedOut. */
  timeoutMs?: number | null
  /** Aborting interrupts the cell; runCode rejects with S206 (the kernel and its state survive). */
  signal?: AbortSignal
  /** Bytes of output one execution may bring to the host (default 32 MiB, 64 KiB – 1 GiB). */
  maxOutputBytes?: number
  /** Outputs (stream chunks, results) one execution may bring (default 100 000, 1 – 10 000 000). */
  maxOutputMessages?: number
  onStdout?: (text: string) => void
  onStderr?: (text: string) => void
  onResult?: (result: CodeResult) => void
  onError?: (error: ExecutionError) => void
}
