/**
 * A command on a pseudo-terminal in the sandbox: what a person types goes in with write(),
 * the terminal's output (stdout and stderr in one, escape sequences and all) comes out as
 * 'data', resize() changes its window. The agent allocates the terminal inside the sandbox:
 * the command leads a session with it as controlling terminal, so job control and Ctrl-C
 * (a 0x03 byte) work, and nothing it does to its terminal reaches the host's.
 */
import { EventEmitter } from 'node:events'
import { PassThrough } from 'node:stream'
import type { Command, CommandResult } from './command.js'
import { assertInternal, INTERNAL } from './internal.js'
import { intInRange, optionsObject } from './options.js'
import type { StartOptions, TerminalSize } from './exec-options.js'
import { errors } from './protocol/errors.gen.js'

export type { TerminalSize }

/** The window sizes a terminal takes (the agent's bounds too). */
export const PTY_SIDE = { min: 1, max: 4096 } as const
const DEFAULT_SIZE = { cols: 80, rows: 24 }
/** TERM when the caller sets none: what most terminal emulators are compatible with. */
const DEFAULT_TERM = 'xterm-256color'

/** Options of sandbox.pty(): start()'s, less stdin (write() types) and shell, plus the window size. */
export interface TerminalOptions extends Omit<StartOptions, 'stdin' | 'pty' | 'shell'>, TerminalSize {}

export interface TerminalEvents {
  /** Output of the terminal as it comes (raw bytes: split UTF-8 sequences are possible). */
  data: [data: Buffer]
  exit: [result: CommandResult]
}

/** Checks a {cols, rows} pair; missing sides take the default. */
export function ptySize(value: unknown, name: string): { cols: number; rows: number } {
  const o = optionsObject(value ?? {}, name, ['cols', 'rows'])
  return {
    cols: intInRange(o.cols, `${name}.cols`, PTY_SIDE.min, PTY_SIDE.max, DEFAULT_SIZE.cols),
    rows: intInRange(o.rows, `${name}.rows`, PTY_SIDE.min, PTY_SIDE.max, DEFAULT_SIZE.rows),
  }
}

/** What a terminal needs of its sandbox (sandbox.ts passes itself). */
interface TerminalSandbox {
  start(command: string, args: string[] | undefined, options: StartOptions): Command
}

/** How sandbox.pty() makes a Terminal; not exported from lib/index.ts. */
let open!: (
  sandbox: TerminalSandbox,
  command: string,
  args: string[] | undefined,
  options: TerminalOptions | undefined,
) => Terminal

export class Terminal extends EventEmitter<TerminalEvents> {
  /** The command on the terminal: its id, status, snapshot, logs() and cancel() are the usual ones. */
  readonly command: Command
  #input: PassThrough

  static {
    open = (sandbox, command, args, options) => new this(INTERNAL, sandbox, command, args, options)
  }

  /** Use sandbox.pty(). */
  private constructor(
    key: typeof INTERNAL,
    sandbox: TerminalSandbox,
    command: string,
    args: string[] | undefined,
    options: TerminalOptions | undefined,
  ) {
    assertInternal(key, 'Terminal', 'sandbox.pty()')
    super()
    const { cols, rows, ...start } = optionsObject(options, 'pty options', [
      'cols',
      'rows',
      'cwd',
      'env',
      'timeoutMs',
      'killGraceMs',
      'signal',
      'retainBytes',
      'idempotencyKey',
      'user',
      'heartbeatMs',
    ]) as TerminalOptions
    const size = ptySize({ cols, rows }, 'pty options')
    const env = { TERM: DEFAULT_TERM, ...(start.env ?? {}) }
    this.#input = new PassThrough()
    this.command = sandbox.start(command, args, { ...start, env, pty: size, stdin: this.#input })
    this.command.on('stdout', (data) => this.emit('data', data))
    this.command.on('exit', (result) => {
      this.#input.end()
      this.emit('exit', result)
    })
    // A failed wait() ends the input too; the caller hears the error from wait().
    this.command.wait().catch(() => this.#input.end())
  }

  get id(): string {
    return this.command.id
  }

  /** Types into the terminal (bytes as a keyboard would send them: "\r" is Enter, "\x03" Ctrl-C). */
  write(data: string | Buffer): void {
    if (typeof data !== 'string' && !Buffer.isBuffer(data)) {
      throw errors.badArgument({ subject: 'terminal input', problem: `must be a string or Buffer, got ${typeof data}` })
    }
    if (this.#input.writableEnded) return // the command has ended: nobody reads it
    this.#input.write(data)
  }

  /** Changes the window size; the command's foreground process group gets SIGWINCH. A no-op once it has ended. */
  async resize(cols: number, rows: number): Promise<void> {
    const size = ptySize({ cols, rows }, 'resize')
    await this.command.resize(size.cols, size.rows)
  }

  /** Resolves with the result when the command ends. */
  wait(): Promise<CommandResult> {
    return this.command.wait()
  }

  /** Sends a signal to the terminal's session leader's process group (SIGHUP is a hang-up). */
  kill(signal: NodeJS.Signals = 'SIGHUP'): Promise<void> {
    return this.command.kill(signal)
  }
}

export { open as openTerminal }
