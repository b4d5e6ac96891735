/** A terminal you can type into (sandbox.pty, start({ pty }), resize). (Issue 31.) */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import type { Terminal } from '../../lib/terminal.js'
import { testRuntime } from '../helpers/runtime.js'

let rt: Runtime
let sb: Sandbox

beforeAll(async () => {
  rt = testRuntime()
  sb = await rt.create({ image: 'base', driver: 'namespace' })
})
afterAll(async () => {
  await rt.close()
})

/** Everything the terminal printed so far, and a wait for a pattern to appear after a mark. */
function screen(term: Terminal) {
  let text = ''
  const waiters: Array<() => void> = []
  term.on('data', (d) => {
    text += d.toString('utf8')
    for (const w of waiters.splice(0)) w()
  })
  return {
    get text() {
      return text
    },
    async until(pattern: RegExp, from = 0): Promise<RegExpMatchArray> {
      for (;;) {
        const m = text.slice(from).match(pattern)
        if (m) return m
        await new Promise<void>((resolve) => waiters.push(resolve))
      }
    },
  }
}

describe('sandbox.pty', () => {
  it('echoes what is typed into sh -i, shows its prompt, follows a resize and ends on exit', async () => {
    const term = sb.pty('sh', ['-i'], { cols: 100, rows: 30, env: { PS1: 'PROMPT> ' } })
    const out = screen(term)
    await out.until(/PROMPT> /)
    let mark = out.text.length
    term.write('echo hi\r')
    // The terminal echoes the typed line, then the command's output, then a new prompt.
    await out.until(/echo hi\r\n(.*\r\n)?hi\r\nPROMPT> /, mark)

    mark = out.text.length
    term.write('stty size; tty\r')
    const before = await out.until(/(\d+) (\d+)\r\n(\/dev\/pts\/\d+)\r\n/, mark)
    expect([before[1], before[2]]).toEqual(['30', '100'])

    await term.resize(132, 43)
    mark = out.text.length
    term.write('stty size\r')
    const after = await out.until(/(\d+) (\d+)\r\n/, mark)
    expect([after[1], after[2]]).toEqual(['43', '132'])

    term.write('exit 3\r')
    const result = await term.wait()
    expect(result.status).toBe('exited')
    expect(result.exitCode).toBe(3)
  })

  it('gives the command a session and a controlling terminal: Ctrl-C interrupts the foreground job, not the shell', async () => {
    const term = sb.pty('sh', ['-i'], { env: { PS1: 'P$ ' } })
    const out = screen(term)
    await out.until(/P\$ /)
    let mark = out.text.length
    // The job says when it runs (the shell has made it the terminal's foreground group by then).
    term.write("sh -c 'echo job-runs; exec sleep 1000'\r")
    await out.until(/job-runs\r\n/, mark)
    // The terminal's line discipline turns 0x03 into SIGINT for the foreground group only.
    mark = out.text.length
    term.write('\x03')
    await out.until(/P\$ /, mark)
    mark = out.text.length
    term.write('echo alive $$\r')
    await out.until(/alive \d+\r\n/, mark)
    term.write('exit\r')
    expect((await term.wait()).exitCode).toBe(0)
  })

  it('start({ pty }) puts stdout on the terminal (isatty) and leaves stderr empty', async () => {
    const cmd = sb.start('sh', ['-c', '[ -t 0 ] && [ -t 1 ] && [ -t 2 ] && echo tty-all; echo err >&2'], {
      pty: { cols: 20, rows: 5 },
    })
    let stdout = ''
    let stderr = ''
    cmd.on('stdout', (d) => (stdout += d))
    cmd.on('stderr', (d) => (stderr += d))
    const r = await cmd.wait()
    expect(r.exitCode).toBe(0)
    expect(stdout).toBe('tty-all\r\nerr\r\n')
    expect(stderr).toBe('')
  })

  it('refuses bad sizes and bad input with S001/S003, and resize of a command without a terminal with S001', async () => {
    expect(() => sb.pty('sh', [], { cols: 0 })).toThrow(expect.objectContaining({ code: 'S003' }))
    expect(() => sb.pty('sh', [], { rows: 5000 })).toThrow(expect.objectContaining({ code: 'S003' }))
    expect(() => sb.pty('sh', [], { cols: 1.5 })).toThrow(expect.objectContaining({ code: 'S001' }))
    expect(() => sb.pty('sh', [], { stdin: 'x' } as never)).toThrow(expect.objectContaining({ code: 'S001' }))
    expect(() => sb.start('sh', [], { pty: { cols: 'wide' } as never })).toThrow(
      expect.objectContaining({ code: 'S001' }),
    )
    const term = sb.pty('cat')
    expect(() => term.write(42 as never)).toThrow(SandboxError)
    await expect(term.resize(0, 10)).rejects.toMatchObject({ code: 'S003' })
    await term.kill('SIGKILL')
    expect((await term.wait()).signal).toBe('SIGKILL')
    // Ended: the resize is a no-op, as is input nobody will read.
    await term.resize(10, 10)
    term.write('late')

    const plain = sb.start('sleep', ['30'])
    await expect(plain.resize(10, 10)).rejects.toMatchObject({
      code: 'S001',
      message: expect.stringContaining('without a terminal'),
    })
    await plain.cancel({ mode: 'force' })
  })
})
