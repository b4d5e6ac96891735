/**
 * The CLI in a tmux pane, driven as a person would: keys typed with send-keys, the screen read
 * with capture-pane, the window resized with resize-window. Each session has its own tmux
 * server (a socket in a temporary directory) so tests never share one. The pane runs a small
 * shell wrapper that saves the terminal's mode (stty -g) before the CLI and compares it after,
 * prints the exit code and the comparison, and wakes the test through a tmux wait-for channel.
 */
import { execFile, execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { CLI } from './helpers.js'

const WRAPPER = `before=$(stty -g)
"$@"
code=$?
after=$(stty -g)
if [ "$before" = "$after" ]; then restored=True; else restored=False; fi
printf '\\n@@EXIT %s RESTORED %s\\n' "$code" "$restored"
tmux -S "$TMUX_TEST_SOCKET" wait-for -S exited
`

export class TmuxTerminal {
  readonly #dir: string
  readonly #socket: string
  /** Every screen read so far, for the failure message. */
  #last = ''

  /** Starts `node dist/cli.js ...args` in a new pane of cols x rows. */
  constructor(args: string[], env: NodeJS.ProcessEnv, size: { cols: number; rows: number } = { cols: 80, rows: 24 }) {
    this.#dir = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-tmux-'))
    this.#socket = path.join(this.#dir, 'socket')
    const conf = path.join(this.#dir, 'tmux.conf')
    // The pane stays after the wrapper ends so the last screen can still be read; no status
    // line, so the pane is the whole window; a long history so nothing scrolls out of reach.
    fs.writeFileSync(conf, 'set -g remain-on-exit on\nset -g status off\nset -g history-limit 10000\n')
    const wrapper = path.join(this.#dir, 'wrapper.sh')
    fs.writeFileSync(wrapper, WRAPPER)
    this.#tmux(
      ['-f', conf, 'new-session', '-d', '-x', String(size.cols), '-y', String(size.rows)],
      ['sh', wrapper, process.execPath, CLI, ...args],
      { ...env, TMUX_TEST_SOCKET: this.#socket },
    )
  }

  #tmux(args: string[], command: string[] = [], env: NodeJS.ProcessEnv = process.env): string {
    // tmux runs a pane's command through sh -c: each word quoted once.
    const shellCommand = command.map((w) => `'${w.replaceAll("'", `'\\''`)}'`).join(' ')
    const argv = ['-S', this.#socket, ...args, ...(shellCommand ? [shellCommand] : [])]
    return execFileSync('tmux', argv, { env, encoding: 'utf8' })
  }

  /** The pane's whole text, history included, without tmux's trailing blank lines. */
  screen(): string {
    this.#last = this.#tmux(['capture-pane', '-p', '-J', '-S', '-', '-E', '-']).replace(/\n+$/, '\n')
    return this.#last
  }

  /** Only the visible rows, as tmux draws them (for full-screen programs). */
  visibleRows(): string[] {
    return this.#tmux(['capture-pane', '-p']).split('\n').slice(0, -1)
  }

  /** Waits until the pane's text after `from` characters matches. */
  async until(pattern: RegExp, from = 0, timeoutMs = 30_000): Promise<RegExpMatchArray> {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      const m = this.screen().slice(from).match(pattern)
      if (m) return m
      if (Date.now() > deadline)
        throw new Error(`no ${pattern} in the pane: ${JSON.stringify(this.#last.slice(-2000))}`)
      await new Promise((resolve) => setTimeout(resolve, 50)) // tmux has no "screen changed" event to wait on
    }
  }

  /** Types literal text (no Enter). */
  text(s: string): void {
    this.#tmux(['send-keys', '-l', s])
  }

  /** Sends tmux key names: 'Enter', 'C-c', 'C-z', 'Escape'. */
  keys(...names: string[]): void {
    this.#tmux(['send-keys', ...names])
  }

  /** Types a line, presses Enter and waits for what it should print, from the prompt's line on. */
  async line(s: string, expected: RegExp): Promise<RegExpMatchArray> {
    const before = this.screen()
    const promptLine = Math.max(0, before.lastIndexOf('\n', before.length - 2)) // the newline before the prompt's line
    this.text(s)
    this.keys('Enter')
    return this.until(expected, promptLine)
  }

  /** Resizes the window (the pane follows it); the CLI hears SIGWINCH from its terminal. */
  resize(cols: number, rows: number): void {
    this.#tmux(['resize-window', '-x', String(cols), '-y', String(rows)])
  }

  /** Waits for the CLI to exit: its code and whether the terminal's mode is what it was before. */
  async exit(): Promise<{ code: number; restored: boolean }> {
    await new Promise<void>((resolve, reject) =>
      execFile('tmux', ['-S', this.#socket, 'wait-for', 'exited'], { timeout: 30_000 }, (err) =>
        err ? reject(new Error(`the CLI did not exit: ${JSON.stringify(this.screen().slice(-2000))}`)) : resolve(),
      ),
    )
    const m = this.screen().match(/@@EXIT (\d+) RESTORED (True|False)/)!
    return { code: Number(m[1]), restored: m[2] === 'True' }
  }

  /** Ends the tmux server (and with it the CLI if it still runs). */
  close(): void {
    try {
      this.#tmux(['kill-server'])
    } catch {
      // already gone
    }
    fs.rmSync(this.#dir, { recursive: true, force: true })
  }
}
