/**
 * 4 000 idle connections to a sandbox's proxy took the host to 3.3 GiB and
 * 3 s stalls. The proxy serves a bounded number of connections at once (past it: 503, closed)
 * and closes a connection that sends no request in time; a working tunnel is left alone.
 * (bench/proxy-idle.ts measures memory and event-loop delay under the flood.)
 * (Issue 28, item 10.)
 */
import net from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { parseNetworkOption } from '../../lib/network/policy.js'
import { PROXY_MAX_CONNECTIONS } from '../../lib/network/proxy.js'
import { openUnix as open, startTestNetwork } from '../helpers/egress.js'

let echo: net.Server
let echoPort: number
beforeAll(async () => {
  echo = net.createServer((s) => s.pipe(s).on('error', () => {}))
  await new Promise<void>((resolve) => echo.listen(0, '127.0.0.1', () => resolve()))
  echoPort = (echo.address() as net.AddressInfo).port
})
afterAll(() => echo.close())

const closed = (s: net.Socket) =>
  new Promise<string>((resolve) => {
    let got = ''
    s.on('data', (d) => (got += d))
    s.on('error', () => {})
    s.once('close', () => resolve(got))
  })

describe("the sandbox proxy's connections", () => {
  it('proxy: idle connections past the cap are refused (503) and the flood holds no more', async () => {
    const network = await startTestNetwork(parseNetworkOption(true)!)
    const sockets: net.Socket[] = []
    try {
      for (let i = 0; i < PROXY_MAX_CONNECTIONS; i++) sockets.push(await open(network.proxyPath))
      const extra = await Promise.all(Array.from({ length: 8 }, () => open(network.proxyPath)))
      for (const got of await Promise.all(extra.map(closed)))
        expect(got).toMatch(/^HTTP\/1\.1 503 [^]*too many connections/)
      // The ones within the cap are still open.
      expect(sockets.every((s) => !s.destroyed)).toBe(true)
    } finally {
      for (const s of sockets) s.destroy()
      await network.close()
    }
  })

  it('proxy: a connection that never sends a request is closed; a tunnel in use is held open', async () => {
    const network = await startTestNetwork(
      parseNetworkOption({ allow: [`127.0.0.1:${echoPort}`], allowHostLoopback: true })!,
      null,
      { proxy: { headersTimeoutMs: 500 } },
    )
    try {
      const tunnel = await open(network.proxyPath)
      const established = new Promise<void>((resolve) =>
        tunnel.once('data', (d) => (expect(String(d)).toMatch(/^HTTP\/1\.1 200/), resolve())),
      )
      tunnel.write(`CONNECT 127.0.0.1:${echoPort} HTTP/1.1\r\n\r\n`)
      await established
      const idle = await open(network.proxyPath)
      expect(await closed(idle)).toBe('')
      // The tunnel outlived the idle connection's timeout and still carries bytes.
      const echoed = new Promise<string>((resolve) => tunnel.once('data', (d) => resolve(String(d))))
      tunnel.write('still here')
      expect(await echoed).toBe('still here')
      tunnel.destroy()
    } finally {
      await network.close()
    }
  })
})
