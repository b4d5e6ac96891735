/**
 * sb.connect() and sb.forward() reach TCP servers on the sandbox's loopback
 * through the agent connection (the sandbox has no network: the default), from the creating
 * process, from a second Runtime that attached, and from the CLI. Real python servers, real
 * sockets on both sides.
 * (Issue 15, ports.)
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Command } from '../../lib/command.js'
import { SandboxError } from '../../lib/errors.js'
import type { PortSocket } from '../../lib/ports.js'
import { runtimeState, type Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { ensureCliBuilt, krunbox, privateCliEnv } from '../cli/helpers.js'
import { processesMentioning, testRuntime } from '../helpers/runtime.js'

const MiB = 1024 * 1024

/** One process, one port per behaviour: echo, report how the host's side ended, close first, reset. */
const SERVERS = `
import select, socket, struct, threading
def serve(port, handler):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('127.0.0.1', port))
    s.listen(256)
    def loop():
        while True:
            c, _ = s.accept()
            threading.Thread(target=handler, args=(c,), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()
def echo(c):
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        c.sendall(b)
    c.close()
def watch(c):
    tag = c.recv(16).decode()
    c.sendall(tag.encode())
    try:
        while c.recv(65536):
            pass
        print('closed ' + tag, flush=True)
    except OSError as e:
        print('closed ' + tag + ' errno ' + str(e.errno), flush=True)
    c.close()
def bye(c):
    c.sendall(b'bye\\n')
    c.close()
def reset(c):
    c.recv(16)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
    c.close()
def flood(c):
    c.setblocking(False)
    chunk, total, want, blocked = b'z' * 65536, 0, 64 << 20, False
    while total < want:
        try:
            total += c.send(chunk[:want - total])
        except BlockingIOError:
            if not blocked:
                blocked = True
                print('blocked', flush=True)
            select.select([], [c], [])
    c.close()
    print('flood done', flush=True)
serve(7000, echo)
serve(7004, flood)
serve(7001, watch)
serve(7002, bye)
serve(7003, reset)
print('ready', flush=True)
threading.Event().wait()
`

const cli = privateCliEnv()
let rt: Runtime
let sb: Sandbox
let servers: Command
let http: Command

/** Resolves once the command's stdout has printed text (it is waited for, never slept for). */
function printed(cmd: Command, text: string): Promise<void> {
  let seen = ''
  return new Promise((resolve) => {
    const onOut = (d: Buffer) => {
      seen += d.toString()
      if (seen.includes(text)) {
        cmd.removeListener('stdout', onOut)
        resolve()
      }
    }
    cmd.on('stdout', onOut)
  })
}

/** Everything the socket gives until it closes, and how it closed. */
function drain(socket: PortSocket | net.Socket): Promise<{ data: Buffer; error: Error | null }> {
  const parts: Buffer[] = []
  socket.on('data', (d: Buffer) => parts.push(d))
  return new Promise((resolve) =>
    socket.once('close', () => resolve({ data: Buffer.concat(parts), error: socket.errored ?? null })),
  )
}

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p
    return 'ok'
  } catch (e) {
    expect(e).toBeInstanceOf(SandboxError)
    return (e as SandboxError).code
  }
}

function refused(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port })
    s.once('connect', () => (s.destroy(), resolve(false)))
    s.once('error', (e: NodeJS.ErrnoException) => resolve(e.code === 'ECONNREFUSED'))
  })
}

/** The agent's host pid: the sandbox's process named agent. */
function agentPid(id: string): number {
  const pid = processesMentioning(id).find((p) => fs.readFileSync(`/proc/${p}/comm`, 'utf8').trim() === 'agent')
  if (pid === undefined) throw new Error(`no agent process for sandbox ${id}`)
  return pid
}

function rssOf(pid: number): number {
  return Number(/^VmRSS:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) * 1024
}

beforeAll(async () => {
  await ensureCliBuilt()
  // The CLI finds the sandbox in its XDG state directory: the runtime uses the same one.
  rt = testRuntime({ stateDir: path.join(cli.env.XDG_STATE_HOME!, 'krunbox', 'sandboxes') })
  sb = await rt.create({ image: 'python', detached: true })
  await sb.fs.writeFile('/srv/servers.py', SERVERS, { parents: true })
  await sb.fs.writeFile('/srv/www/hello.txt', 'hello from the sandbox\n', { parents: true })
  servers = sb.start('python3', ['-u', '/srv/servers.py'], { timeoutMs: 600_000 })
  http = sb.start('python3', ['-u', '-m', 'http.server', '8000', '--bind', '127.0.0.1', '--directory', '/srv/www'], {
    timeoutMs: 600_000,
  })
  await Promise.all([printed(servers, 'ready'), printed(http, 'Serving HTTP')])
}, 240_000)

afterAll(async () => {
  if (sb?.status !== 'destroyed') await sb?.stop().catch(() => {})
  await rt?.close()
  fs.rmSync(cli.home, { recursive: true, force: true })
})

describe('sb.connect() and sb.forward()', () => {
  it('a python http.server started with start() answers through forward(); close() stops the listener', async () => {
    expect(sb.driver).toBe('namespace')
    const fw = await sb.forward(8000)
    const res = await fetch(`http://127.0.0.1:${fw.port}/hello.txt`)
    expect(res.status).toBe(200)
    expect(await res.text()).toBe('hello from the sandbox\n')
    await fw.close()
    expect(await refused(fw.port)).toBe(true)
  })

  it('bad ports are S001, a port nobody listens on S230, a host port in use S232', async () => {
    for (const bad of [0, 65536, 1.5, -1, '80', null]) expect(await codeOf(sb.connect(bad as number))).toBe('S001')
    expect(await codeOf(sb.connect(7000, { nope: 1 } as never))).toBe('S001')
    expect(await codeOf(sb.forward(70000))).toBe('S001')
    expect(await codeOf(sb.forward(8000, { hostPort: 1.5 }))).toBe('S001')
    const err = await sb.connect(7999).catch((e: SandboxError) => e)
    expect(err).toMatchObject({ code: 'S230', retryable: true })
    expect((err as Error).message).toContain('7999')
    const taken = net.createServer()
    await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r))
    const hostPort = (taken.address() as net.AddressInfo).port
    const busy = await sb.forward(8000, { hostPort }).catch((e: SandboxError) => e)
    expect(busy).toMatchObject({ code: 'S232' })
    expect((busy as Error).message).toContain(String(hostPort))
    taken.close()
    // A forward to a port nobody listens on: each client is reset, the forward says why.
    const fw = await sb.forward(7999)
    const failed = new Promise<SandboxError>((r) => fw.once('connectionError', r))
    const client = net.connect({ host: '127.0.0.1', port: fw.port })
    client.on('error', () => {})
    expect((await drain(client)).data.length).toBe(0)
    expect((await failed).code).toBe('S230')
    await fw.close()
  })

  it('100 parallel connect()s get their bytes back intact', async () => {
    const payloads = Array.from({ length: 100 }, () => randomBytes(64 * 1024 + Math.floor(Math.random() * 4096)))
    const echoed = await Promise.all(
      payloads.map(async (payload) => {
        const socket = await sb.connect(7000)
        const done = drain(socket)
        socket.end(payload)
        return done
      }),
    )
    echoed.forEach(({ data, error }, i) => {
      expect(error).toBeNull()
      expect(data.equals(payloads[i])).toBe(true)
    })
  })

  it('an end passes through both ways; a destroy closes the service side; a reset is S231', async () => {
    // The host ends: the echo service reads EOF, answers what it got and closes; the socket closes cleanly.
    const echo = await sb.connect(7000)
    const echoed = drain(echo)
    echo.end('half')
    expect(await echoed).toEqual({ data: Buffer.from('half'), error: null })
    // The service closes first: its bytes arrive, then the end, and our side ends too.
    const bye = await sb.connect(7002)
    expect(await drain(bye)).toEqual({ data: Buffer.from('bye\n'), error: null })
    expect(bye.writableFinished).toBe(true)
    // The host destroys: the service sees its connection end (once it has the tag it echoes).
    const watch = await sb.connect(7001)
    const seen = printed(servers, 'closed w1')
    watch.write('w1')
    await new Promise((r) => watch.once('data', r))
    watch.destroy()
    await seen
    // The service resets: the socket is destroyed with S231.
    const reset = await sb.connect(7003)
    const ended = drain(reset)
    reset.write('x')
    const { error } = await ended
    expect(error).toMatchObject({ code: 'S231' })
  })

  it('a reader that does not read stops the service through TCP; nothing piles up on the way', async () => {
    // Listening first: the server's line can arrive in the same read as the connect's answer.
    let floodDone = false
    const done = printed(servers, 'flood done').then(() => (floodDone = true))
    const blocked = printed(servers, 'blocked')
    const socket = await sb.connect(7004) // not flowing: nobody reads yet
    await blocked
    for (let i = 0; i < 3; i++) await sb.exec('true') // time for a broken window to show
    expect(floodDone).toBe(false)
    // At most the stream's 1 MiB window, plus what the socket buffers, reached the host.
    expect(socket.bytesRead).toBeLessThanOrEqual(MiB + 512 * 1024)
    const { data, error } = await drain(socket)
    expect(error).toBeNull()
    expect(data.length).toBe(64 * MiB)
    await done
  })

  it('1 GiB through the echo service keeps host and agent RSS flat', { timeout: 180_000 }, async () => {
    const agent = agentPid(sb.id)
    const block = randomBytes(MiB)
    const roundTrip = async (mib: number) => {
      const socket = await sb.connect(7000)
      // What comes back must be the block again and again; compared in place (cheaper than hashing 1 GiB).
      let received = 0
      let intact = true
      socket.on('data', (d: Buffer) => {
        for (let off = 0; off < d.length;) {
          const at = (received + off) % MiB
          const n = Math.min(d.length - off, MiB - at)
          if (!d.subarray(off, off + n).equals(block.subarray(at, at + n))) intact = false
          off += n
        }
        received += d.length
      })
      const closed = new Promise((r) => socket.once('close', r))
      for (let i = 0; i < mib; i++) {
        if (!socket.write(block)) await new Promise((r) => socket.once('drain', r))
      }
      socket.end()
      await closed
      expect(socket.errored).toBeNull()
      expect(received).toBe(mib * MiB)
      expect(intact).toBe(true)
    }
    await roundTrip(64) // warm up: buffers, pools, JIT
    const base = { host: process.memoryUsage.rss(), agent: rssOf(agent) }
    const peak = { ...base }
    const sampler = setInterval(() => {
      peak.host = Math.max(peak.host, process.memoryUsage.rss())
      peak.agent = Math.max(peak.agent, rssOf(agent))
    }, 50)
    try {
      await roundTrip(1024)
    } finally {
      clearInterval(sampler)
    }
    const growth = { hostMiB: (peak.host - base.host) / MiB, agentMiB: (peak.agent - base.agent) / MiB }
    console.log(
      `1 GiB echo: host RSS ${(base.host / MiB).toFixed(0)} MiB +${growth.hostMiB.toFixed(1)}, agent RSS ${(base.agent / MiB).toFixed(1)} MiB +${growth.agentMiB.toFixed(1)}`,
    )
    expect(growth.hostMiB).toBeLessThan(64)
    expect(growth.agentMiB).toBeLessThan(24)
  })

  it('krunbox port-forward carries connections from the shell until Ctrl-C', async () => {
    let child: import('node:child_process').ChildProcess | undefined
    let exited: ReturnType<typeof krunbox> | undefined
    const address = new Promise<string>((resolve) => {
      const run = krunbox(['port-forward', sb.id, '8000'], {
        env: { ...cli.env, KRUNBOX_TOKEN: sb.accessToken! },
        onSpawn: (c) => {
          child = c
          let out = ''
          c.stdout!.on('data', (d: Buffer) => {
            out += d.toString()
            if (out.includes('\n')) resolve(out.split('\n')[0])
          })
        },
      })
      exited = run
    })
    const addr = await address
    expect(addr).toMatch(/^127\.0\.0\.1:\d+$/)
    const res = await fetch(`http://${addr}/hello.txt`)
    expect(await res.text()).toBe('hello from the sandbox\n')
    child!.kill('SIGINT')
    const result = await exited!
    expect(result.stderr).toBe('')
    expect(result.code).toBe(0)
    expect(await refused(Number(addr.split(':')[1]))).toBe(true)
    const bad = await krunbox(['port-forward', sb.id, '8000:99999'], { env: cli.env })
    expect(bad.code).toBe(125)
    expect(bad.stderr).toContain('S001')
    expect(bad.stderr).toContain('8000:99999')
  })

  it('works from a second Runtime that attached to the detached sandbox; its forward closes when the sandbox stops', async () => {
    const other = testRuntime({ stateDir: runtimeState(rt).root })
    try {
      const same = await other.attach(sb.id, { accessToken: sb.accessToken! })
      const socket = await same.connect(7000)
      const echoed = drain(socket)
      socket.end('from another runtime')
      expect((await echoed).data.toString()).toBe('from another runtime')
      const fw = await same.forward(8000)
      expect(await (await fetch(`http://127.0.0.1:${fw.port}/hello.txt`)).text()).toBe('hello from the sandbox\n')
      const open = await same.connect(7000)
      const cut = drain(open)
      const closed = new Promise<void>((r) => fw.once('close', r))
      await sb.stop()
      await closed
      expect(await refused(fw.port)).toBe(true)
      // Its service was killed with the sandbox: the open connection closed too.
      await cut
      expect(open.destroyed).toBe(true)
      expect(await codeOf(same.connect(7000))).toBe('S004')
    } finally {
      await other.close()
    }
  })
})
