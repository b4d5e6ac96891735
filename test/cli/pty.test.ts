/** `krunbox run`/`exec` on a real host terminal (pty-host-terminal.ts). */
import fs from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { CLI, ensureCliBuilt, krunbox, privateCliEnv } from './helpers.js'
import { HostTerminal } from './pty-host-terminal.js'

const { home, env } = privateCliEnv()

beforeAll(ensureCliBuilt, 120_000)
afterAll(() => fs.rmSync(home, { recursive: true, force: true }))

/** The host pid of a namespace sandbox's agent: the process in the sandbox's cgroup that runs /krunbox/agent. */
function agentPidOf(id: string): number {
  for (const pid of fs.readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      if (!fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8').includes(`/krunbox/${id}`)) continue
      if (fs.readFileSync(`/proc/${pid}/cmdline`, 'latin1').startsWith('/krunbox/agent')) return Number(pid)
    } catch {
      // ended while we looked
    }
  }
  throw new Error(`no agent process for ${id}`)
}

describe('krunbox run on a terminal', () => {
  it('runs sh -i on a terminal in the sandbox: typed input, window size and its changes, Ctrl-C to the job, the host terminal restored', async () => {
    const t = new HostTerminal(['run', 'base', '-e', 'PS1=SBX> ', '--', 'sh', '-i'], env)
    await t.until(/SBX> /)
    await t.type('echo hi', /\r\nhi\r\nSBX> /)
    const size = await t.type('stty size', /\r\n(\d+ \d+)\r\n/)
    expect(size[1]).toBe('24 80')
    // SIGWINCH on the host terminal reaches the sandbox's terminal.
    t.send({ size: [40, 120] })
    let m: RegExpMatchArray
    do m = await t.type('stty size', /\r\n(\d+ \d+)\r\n/)
    while (m[1] === '24 80') // the CLI hears SIGWINCH asynchronously: ask again until it has passed it on
    expect(m[1]).toBe('40 120')
    // Ctrl-C is a byte in raw mode: the sandbox's terminal turns it into SIGINT for the foreground job.
    await t.type("sh -c 'echo job-runs; exec sleep 1000'", /job-runs\r\n/)
    const mark = t.text.length
    t.send({ w: '\x03' })
    await t.until(/SBX> /, mark)
    await t.type('echo still-here', /\r\nstill-here\r\n/)
    t.send({ w: 'exit 5\r' })
    expect(await t.exit()).toEqual({ code: 5, restored: true })
  }, 60_000)

  it('restores the host terminal when a second SIGTERM ends the CLI while the command runs', async () => {
    const t = new HostTerminal(['run', 'base', '-e', 'PS1=SBX> ', '--', 'sh', '-i'], env)
    await t.until(/SBX> /)
    // The first TERM goes to the command (an interactive sh ignores it), the second ends the CLI.
    t.send({ kill: 'TERM' })
    await t.type('echo after-first', /\r\nafter-first\r\n/)
    t.send({ kill: 'TERM' })
    expect(await t.exit()).toEqual({ code: 143, restored: true })
  }, 60_000)

  it('restores the host terminal when the sandbox is stopped from another CLI under exec -it', async () => {
    const id = (await krunbox(['create', 'base'], { env, timeoutMs: 60_000 })).stdout.trim()
    const t = new HostTerminal(['exec', '-it', '-e', 'PS1=SBX> ', id, '--', 'sh', '-i'], env)
    await t.until(/SBX> /)
    expect((await krunbox(['stop', id], { env })).code).toBe(0)
    const exit = await t.exit()
    expect(exit.restored).toBe(true)
    expect(exit.code).not.toBe(0)
  }, 60_000)

  it('restores the host terminal when the sandbox crashes under run (its agent SIGKILLed)', async () => {
    const t = new HostTerminal(['run', 'base', '-e', 'PS1=SBX> ', '--', 'sh', '-i'], env)
    await t.until(/SBX> /)
    const id = (await krunbox(['list'], { env })).stdout.split('\n')[1].split('\t')[0]
    process.kill(agentPidOf(id), 'SIGKILL')
    const exit = await t.exit()
    expect(exit.restored).toBe(true)
    expect(exit.code).not.toBe(0)
  }, 60_000)

  it('-i passes what is typed at a terminal to a command whose output is piped (no terminal in the sandbox then)', async () => {
    const t = new HostTerminal([], env, [
      'sh',
      '-c',
      `"${process.execPath}" "${CLI}" run -i base -- sh -c 'tty; cat' | cat`,
    ])
    await t.until(/not a tty\r\n/)
    await t.type('typed line', /typed line\r\n(.*\r\n)?typed line\r\n/)
    t.send({ w: '\x04' }) // Ctrl-D at the start of a line: end of input on the host terminal
    expect((await t.exit()).code).toBe(0)
  }, 60_000)

  it('without -i a terminal on stdin is not read, and one line on stderr says so (with --json too)', async () => {
    for (const json of [[], ['--json']]) {
      const t = new HostTerminal([], env, [
        'sh',
        '-c',
        `"${process.execPath}" "${CLI}" run ${json.join(' ')} base -- sh -c 'cat; echo cat-ended' | cat`,
      ])
      await t.until(/cat-ended/)
      expect(t.text).toMatch(/^krunbox: stdin is a terminal and is not passed to the command; add -i to type into it/m)
      expect((await t.exit()).code).toBe(0)
    }
  }, 60_000)

  it('exec -it attaches a terminal to a created sandbox; piped stdin without -t stays a plain pipe', async () => {
    const created = await krunbox(['create', 'base'], { env, timeoutMs: 60_000 })
    const id = created.stdout.trim()
    try {
      const t = new HostTerminal(['exec', '-it', id, '--', 'sh', '-c', 'tty; stty size'], env)
      const m = await t.until(/(\/dev\/pts\/\d+)\r\n(\d+ \d+)\r\n/)
      expect(m[2]).toBe('24 80')
      expect((await t.exit()).code).toBe(0)
      const piped = await krunbox(['exec', id, '--', 'sh', '-c', 'tty; cat'], { env, input: 'piped\n' })
      expect(piped.stdout).toBe('not a tty\npiped\n')
    } finally {
      await krunbox(['stop', id], { env })
    }
  }, 90_000)
})
