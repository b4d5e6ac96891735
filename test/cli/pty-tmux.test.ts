/**
 * `krunbox run -it` / `exec -it` in tmux, typed into as a person would (send-keys) and read off
 * the screen (capture-pane): a python REPL, sh with job control, full-screen programs (vi, top)
 * and window resizes; after each, the host terminal's mode is what it was before.
 */
import fs from 'node:fs'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { ensureCliBuilt, krunbox, privateCliEnv } from './helpers.js'
import { TmuxTerminal } from './tmux-terminal.js'

const { home, env } = privateCliEnv()
const open: TmuxTerminal[] = []
function tmux(args: string[], size?: { cols: number; rows: number }): TmuxTerminal {
  const t = new TmuxTerminal(args, env, size)
  open.push(t)
  return t
}

beforeAll(ensureCliBuilt, 120_000)
afterEach(() => {
  for (const t of open.splice(0)) t.close()
})
afterAll(() => fs.rmSync(home, { recursive: true, force: true }))

/** Asks until the answer differs from `stale` (the CLI passes SIGWINCH on asynchronously). */
async function askUntilChanged(t: TmuxTerminal, line: string, answer: RegExp, stale: string): Promise<string> {
  for (;;) {
    const m = await t.line(line, answer)
    if (m[1] !== stale) return m[1]
  }
}

/** Waits until the visible rows satisfy `ok` (a full-screen program redraws in place). */
async function untilRows(t: TmuxTerminal, ok: (rows: string[]) => boolean): Promise<string[]> {
  const deadline = Date.now() + 30_000
  for (;;) {
    const rows = t.visibleRows()
    if (ok(rows)) return rows
    if (Date.now() > deadline) throw new Error(`the screen never matched: ${JSON.stringify(rows)}`)
    await new Promise((resolve) => setTimeout(resolve, 50)) // tmux has no "screen changed" event to wait on
  }
}

describe('krunbox -it in tmux', () => {
  it('run -it python -- python3: a REPL that evaluates what is typed, Ctrl-C interrupts a loop, a resize is seen, exit() restores the terminal', async () => {
    const t = tmux(['run', '-it', 'python', '--', 'python3'])
    await t.until(/>>> ?$/m)
    await t.line('print(6 * 7)', /\n42\n/)
    const size = /os\.terminal_size\(columns=(\d+), lines=(\d+)\)/
    const first = await t.line('import os; os.get_terminal_size()', size)
    expect([first[1], first[2]]).toEqual(['80', '24'])
    // Ctrl-C reaches the sandbox's terminal, whose line discipline sends python SIGINT.
    t.text('while True: pass')
    t.keys('Enter', 'Enter')
    await t.until(/while True: pass\n\.\.\. ?\n$/)
    t.keys('C-c')
    await t.until(/KeyboardInterrupt\n>>> ?\n$/)
    t.resize(100, 30)
    const resized = await askUntilChanged(t, 'print(*os.get_terminal_size())', /\n(\d+ \d+)\n/, '80 24')
    expect(resized).toBe('100 30')
    t.text('exit()')
    t.keys('Enter')
    expect(await t.exit()).toEqual({ code: 0, restored: true })
  }, 90_000)

  it('exec -it <id> -- sh: job control (background, Ctrl-Z, fg, Ctrl-C), stty size and a resize, the terminal restored', async () => {
    const created = await krunbox(['create', 'base'], { env, timeoutMs: 60_000 })
    const id = created.stdout.trim()
    try {
      const t = tmux(['exec', '-it', '-e', 'PS1=SBX$ ', id, '--', 'sh'])
      await t.until(/SBX\$ ?$/m)
      await t.line('stty size', /\n24 80\n/)
      await t.line('sleep 1000 &', /sleep 1000 &\nSBX\$ ?\n$/)
      await t.line('set -o | grep monitor', /\nmonitor +on\n/) // the shell has job control
      // Ctrl-Z stops the foreground job and gives the prompt back: the shell owns the terminal.
      t.text('sleep 999')
      t.keys('Enter')
      await t.until(/sleep 999\n$/)
      t.keys('C-z')
      await t.until(/\[2\]\+ +Stopped +sleep 999\n/)
      const listed = (await t.line('jobs', / jobs\n((?:\[\d\].*\n){2})SBX/))[1]
      expect(listed).toMatch(/^\[1\]- +Running +sleep 1000$/m)
      expect(listed).toMatch(/^\[2\]\+ +Stopped +sleep 999$/m)
      // fg brings the stopped job back to the foreground; Ctrl-C ends it (SIGINT to its group only).
      await t.line('fg %2', /\nsleep 999\n$/)
      t.keys('C-c')
      await t.until(/sleep 999\n(\^C)?\n?SBX\$ ?\n$/)
      await t.line('jobs', /\[1\]\+ +Running +sleep 1000/)
      await t.line('kill %1; wait; echo reaped', /\nreaped\n/)
      t.resize(120, 40)
      expect(await askUntilChanged(t, 'stty size', /\n(\d+ \d+)\n/, '24 80')).toBe('40 120')
      t.text('exit 7')
      t.keys('Enter')
      expect(await t.exit()).toEqual({ code: 7, restored: true })
    } finally {
      await krunbox(['stop', id], { env })
    }
  }, 90_000)

  it('full-screen programs draw in place: vi edits a file on the whole screen and follows a resize, top draws its table and quits on q', async () => {
    const t = tmux(['run', '-it', 'base', '--', 'sh', '-c', 'vi /tmp/note; echo "saved: $(cat /tmp/note)"; top'])
    // vi fills every row below the text with "~" and keeps its status line at the bottom.
    await t.until(/~\n~\n/)
    const rows = t.visibleRows()
    expect(rows).toHaveLength(24)
    expect(rows.slice(1, 23).every((r) => r.startsWith('~'))).toBe(true)
    t.text('ihello from vi')
    await untilRows(t, (r) => r[0] === 'hello from vi' && r[23].startsWith('I /tmp/note'))
    t.keys('Escape') // back to command mode: vi's status line starts with "-"
    await untilRows(t, (r) => r[23].startsWith('- /tmp/note [Modified]'))
    // After a resize vi redraws for the new height: its "~" rows reach the new last row but one.
    t.resize(90, 30)
    await untilRows(
      t,
      (r) => r.length === 30 && r[0] === 'hello from vi' && r.slice(1, 29).every((l) => l.startsWith('~')),
    )
    t.text(':wq')
    t.keys('Enter')
    await t.until(/saved: hello from vi\n/)
    // top's header and process table, drawn on the screen; q ends it and the command.
    await t.until(/PID +PPID +USER/)
    expect(t.visibleRows().some((r) => /^Mem: /.test(r))).toBe(true)
    t.text('q')
    expect(await t.exit()).toEqual({ code: 0, restored: true })
  }, 90_000)
})
