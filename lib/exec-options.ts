/**
 * Options of a command: exec()'s and start()'s (and the terminal size start() takes), apart from
 * sandbox.ts so the terminal module can use them without importing the sandbox back.
 */
import type { Readable } from 'node:stream'

/** A terminal's window size (start({ pty }), sandbox.pty()). */
export interface TerminalSize {
  /** Columns, 1–4096 (default 80). */
  cols?: number
  /** Rows, 1–4096 (default 24). */
  rows?: number
}

/** Options of exec() and start(). Defaults and bounds: lib/defaults.ts. */
export interface ExecOptions {
  /** Absolute working directory inside the sandbox. Default `/workspace`. */
  cwd?: string
  /** Added to the sandbox's env for this command. Keys starting with KRUNBOX are refused (S006). */
  env?: Record<string, string>
  /**
   * Enforced inside the sandbox on the whole process group: SIGTERM, then SIGKILL after
   * killGraceMs. In ms, 1 ms–7 days; exec() defaults to 60 000, start() to none; `null` means
   * no deadline.
   */
  timeoutMs?: number | null
  /** Between SIGTERM and SIGKILL on a timeout or abort, in ms (the same grace `cancel({ killGraceMs })` takes). 0–60 000, default 2 000. */
  killGraceMs?: number
  /** Written to the command's stdin, then closed. Default: stdin is empty. */
  stdin?: string | Buffer
  /** Aborting it cancels the command gracefully; exec() then rejects with S206. */
  signal?: AbortSignal
  /** Run `command args...` joined with spaces through /bin/sh -c. Default false. */
  shell?: boolean
  /** `'utf8'` (default): stdout and stderr are strings; `'buffer'`: Buffers. */
  encoding?: 'utf8' | 'buffer'
  /** Most bytes kept per stream in the exec result; past it the result says truncated. */
  maxBuffer?: number
  /** Bytes of output the agent keeps for late readers (logs, readLogs). 65 536–67 108 864, default 8 MiB. */
  retainBytes?: number
  /**
   * A retry with the same key (from this or any other client of the sandbox) gets the command
   * the first request started instead of running it again, for as long as the agent remembers it.
   */
  idempotencyKey?: string
  /** Run as this user: a name from the image's passwd, "uid" or "uid:gid" (default: the sandbox's user, else root). */
  user?: string
}

export interface StartOptions extends Omit<ExecOptions, 'stdin' | 'encoding' | 'maxBuffer'> {
  stdin?: string | Buffer | Readable
  /**
   * Run on a pseudo-terminal of this size (cols, rows: 1–4096, default 80×24) in the sandbox:
   * stdout is the terminal's output (stderr stays empty), stdin is typed into it, and
   * `command.resize()` changes it. `sandbox.pty()` wraps this for interactive use.
   */
  pty?: TerminalSize
  /** A 'heartbeat' event after this many ms of silence while the command runs (100 ms – 1 h, 0: none; default 15 000). */
  heartbeatMs?: number
}
