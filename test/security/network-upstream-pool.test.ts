/**
 * The proxy keeps an upstream connection after a plain-HTTP answer that ended where its framing
 * said, for the same sandbox's next bodiless request to the same checked address and port
 * (lib/network/upstream-pool.ts). A hostile upstream (an allowed destination the sandbox asked
 * for) tries to make one request's connection carry something else: an answer nobody asked for,
 * bytes sent while idle, a connection another sandbox's request would reuse. Each test fails with
 * the defence it names removed.
 */
import net from 'node:net'
import v8 from 'node:v8'
import vm from 'node:vm'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { parseNetworkOption } from '../../lib/network/policy.js'
import { openUnix, startTestNetwork } from '../helpers/egress.js'

type Mode = 'plain' | 'forged-after-body' | 'talks-when-idle' | 'reset-second' | 'close-framed'

/** An upstream whose every connection gets an id; each answer names the connection and the path. */
let mode: Mode = 'plain'
let connections: net.Socket[] = []
/** Each request seen: its connection's id and its head. */
let requests: { conn: number; head: string }[] = []
let upstream: net.Server
let port = 0
v8.setFlagsFromString('--expose-gc')
const gc = vm.runInNewContext('gc') as () => void
const networks: Awaited<ReturnType<typeof startTestNetwork>>[] = []

beforeAll(async () => {
  upstream = net.createServer((s) => {
    const conn = connections.push(s) - 1
    let buf = ''
    s.on('error', () => {})
    s.on('data', (d) => {
      buf += d.toString('latin1')
      let end: number
      while ((end = buf.indexOf('\r\n\r\n')) >= 0) {
        const head = buf.slice(0, end)
        buf = buf.slice(end + 4)
        const seen = requests.filter((r) => r.conn === conn).length
        requests.push({ conn, head })
        if (mode === 'reset-second' && seen === 1) return void s.resetAndDestroy()
        const body = `conn ${conn} ${head.split(' ')[1]}\n`
        if (mode === 'close-framed') return void s.end(`HTTP/1.1 200 OK\r\n\r\n${body}`)
        let answer = `HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\n\r\n${body}`
        if (mode === 'forged-after-body') answer += `HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\nFORGED\n`
        s.write(answer)
        if (mode === 'talks-when-idle')
          setImmediate(() => s.write('HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nLATE\n'))
      }
    })
  })
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', () => resolve()))
  port = (upstream.address() as net.AddressInfo).port
})
afterEach(() => {
  mode = 'plain'
  for (const s of connections) s.destroy()
  connections = []
  requests = []
})
afterAll(async () => {
  await Promise.all(networks.map((n) => n.close()))
  upstream.close()
})

async function network(options: Parameters<typeof startTestNetwork>[2] = {}) {
  const n = await startTestNetwork(
    parseNetworkOption({ allow: [`127.0.0.1:${port}`], allowHostLoopback: true })!,
    null,
    options,
  )
  networks.push(n)
  return n
}

/** One request through the proxy's socket, on its own connection, read to the close. */
async function get(proxyPath: string, path: string, body?: string): Promise<string> {
  const s = await openUnix(proxyPath)
  return new Promise((resolve) => {
    let got = ''
    s.on('data', (d) => (got += d.toString('latin1')))
    s.on('error', () => {})
    s.once('close', () => resolve(got))
    const framing = body === undefined ? '' : `Content-Length: ${body.length}\r\n`
    s.write(
      `${body === undefined ? 'GET' : 'POST'} http://127.0.0.1:${port}${path} HTTP/1.1\r\n${framing}\r\n${body ?? ''}`,
    )
  })
}

const closed = (s: net.Socket) => (s.destroyed ? Promise.resolve() : new Promise((r) => s.once('close', r)))

describe('upstream connections kept by the proxy', () => {
  it('pool: a second bodiless request goes over the first one’s connection, and is routed and counted on its own', async () => {
    const n = await network()
    expect(await get(n.proxyPath, '/a')).toMatch(/^HTTP\/1\.1 200 [^]*Connection: close\r\n[^]*conn 0 \/a\n$/)
    expect(await get(n.proxyPath, '/b')).toMatch(/conn 0 \/b\n$/)
    expect(connections).toHaveLength(1)
    expect(n.usage().allowed).toBe(2)
    // The client is still told one request per connection; the upstream heard nothing about it.
    expect(requests[1].head).not.toMatch(/connection:/i)
  })

  it('pool: an answer followed by bytes no request asked for (a forged second answer) never reaches the next request', async () => {
    const n = await network()
    mode = 'forged-after-body'
    expect(await get(n.proxyPath, '/a')).toMatch(/conn 0 \/a\n$/)
    const second = await get(n.proxyPath, '/b')
    expect(second).not.toContain('FORGED')
    expect(second).toMatch(/conn 1 \/b\n/)
  })

  it('pool: a kept connection that sends anything while idle is closed, never handed to the next request', async () => {
    const n = await network()
    mode = 'talks-when-idle'
    expect(await get(n.proxyPath, '/a')).toMatch(/conn 0 \/a\n$/)
    await closed(connections[0])
    const second = await get(n.proxyPath, '/b')
    expect(second).not.toContain('LATE')
    expect(second).toMatch(/conn 1 \/b\n/)
  })

  it('pool: a kept connection the upstream drops while the request is on it: the request goes again on a new one', async () => {
    const n = await network()
    mode = 'reset-second'
    expect(await get(n.proxyPath, '/a')).toMatch(/conn 0 \/a\n$/)
    expect(await get(n.proxyPath, '/b')).toMatch(/^HTTP\/1\.1 200 [^]*conn 1 \/b\n$/)
    expect(requests.map((r) => r.conn)).toEqual([0, 0, 1])
  })

  it('pool: answers framed by the close, and requests with a body, never leave a connection behind', async () => {
    const n = await network()
    mode = 'close-framed'
    expect(await get(n.proxyPath, '/a')).toMatch(/conn 0 \/a\n$/)
    mode = 'plain'
    expect(await get(n.proxyPath, '/post', 'hello')).toMatch(/conn 1 \/post\n$/)
    expect(requests[1].head).toMatch(/\r\nConnection: close$/)
    await Promise.all([closed(connections[0]), closed(connections[1])])
    expect(await get(n.proxyPath, '/c')).toMatch(/conn 2 \/c\n$/)
  })

  it('pool: one sandbox’s kept connection never carries another sandbox’s request', async () => {
    const a = await network()
    const b = await network()
    expect(await get(a.proxyPath, '/a')).toMatch(/conn 0 \/a\n$/)
    expect(await get(b.proxyPath, '/b')).toMatch(/conn 1 \/b\n$/)
    expect(await get(a.proxyPath, '/a2')).toMatch(/conn 0 \/a2\n$/)
    expect(await get(b.proxyPath, '/b2')).toMatch(/conn 1 \/b2\n$/)
  })

  it('pool: 64 requests at once keep at most the per-destination bound, each kept one closed after idleMs', async () => {
    const idleMs = 1_000
    const n = await network({ proxy: { upstreamPool: { total: 16, perDestination: 4, idleMs } } })
    const answers = await Promise.all(Array.from({ length: 64 }, (_, i) => get(n.proxyPath, `/c${i}`)))
    answers.forEach((got, i) => expect(got).toMatch(new RegExp(`/c${i}\\n$`)))
    const t0 = performance.now()
    // Past the bound a connection is closed at once; a kept one only when idle for idleMs.
    const closedAfter = await Promise.all(connections.map(async (s) => (await closed(s), performance.now() - t0)))
    const kept = closedAfter.filter((ms) => ms >= idleMs / 2)
    expect(kept.length).toBeGreaterThanOrEqual(1)
    expect(kept.length).toBeLessThanOrEqual(4)
  })

  it('pool: 10 000 requests through one proxy keep one connection, no listener piles up, memory stays flat', async () => {
    const n = await network()
    const warnings: string[] = []
    const onWarning = (w: Error) => warnings.push(w.name)
    process.on('warning', onWarning)
    try {
      for (let i = 0; i < 1_000; i++) await get(n.proxyPath, '/warm')
      gc()
      const before = process.memoryUsage().heapUsed
      for (let i = 0; i < 10_000; i++) {
        // The upstream's own record of them is not the proxy's memory.
        if (i % 1_000 === 0) requests = []
        await get(n.proxyPath, '/x')
      }
      requests = []
      gc()
      const grown = process.memoryUsage().heapUsed - before
      expect(connections).toHaveLength(1)
      expect(warnings).toEqual([])
      expect(grown).toBeLessThan(2 * 1024 * 1024)
    } finally {
      process.off('warning', onWarning)
    }
  }, 120_000)
})
