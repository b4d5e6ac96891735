/**
 * Issue 18: the proxy a sandbox's traffic leaves through listens on the host's 127.0.0.1, where
 * any local user can reach it. It serves only connections from this process's own user (pasta,
 * which the host process starts); another user's connection is closed unanswered.
 */
import { execFile } from 'node:child_process'
import net from 'node:net'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loopbackPeerUid, peerIsOwnUser } from '../../lib/network/loopback-peer.js'
import { startProxy } from '../../lib/network/proxy.js'
import { asRoot, NOBODY } from '../helpers/rootless.js'

let target: net.Server
let proxy: Awaited<ReturnType<typeof startProxy>>
const routed: string[] = []

beforeAll(async () => {
  target = net.createServer((s) => s.end('hello from the target\n'))
  await new Promise<void>((resolve) => target.listen(0, '127.0.0.1', () => resolve()))
  proxy = await startProxy({
    admit: peerIsOwnUser,
    route: async (host, port) => {
      routed.push(`${host}:${port}`)
      return { address: '127.0.0.1' }
    },
    denied: () => {},
    allowed: () => {},
  })
})
afterAll(async () => {
  await proxy.close()
  target.close()
})

/** A script that CONNECTs through the proxy and prints all it got back before the close. */
const client = (targetPort: number) => `
const s = require('net').connect(${proxy.port}, '127.0.0.1', () => s.write('CONNECT 127.0.0.1:${targetPort} HTTP/1.1\\r\\n\\r\\n'))
let got = ''
s.on('data', (d) => (got += d))
s.on('error', () => {})
s.on('close', () => console.log(JSON.stringify(got)))
`
const run = promisify(execFile)

describe("the sandbox proxy's peers", () => {
  it('finds the uid of a loopback connection in the kernel tables', async () => {
    const server = net.createServer()
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()))
    const accepted = new Promise<net.Socket>((resolve) => server.once('connection', resolve))
    const c = net.connect((server.address() as net.AddressInfo).port, '127.0.0.1')
    const s = await accepted
    expect(await loopbackPeerUid(s.remotePort!, s.localPort!)).toBe(process.getuid!())
    expect(await loopbackPeerUid(s.remotePort!, s.localPort! === 65535 ? 1 : s.localPort! + 1)).toBeNull()
    c.destroy()
    server.close()
  })

  it("serves this process's own user", async () => {
    const { stdout } = await run(process.execPath, ['-e', client((target.address() as net.AddressInfo).port)])
    expect(JSON.parse(stdout)).toMatch(/^HTTP\/1.1 200 Connection Established\r\n\r\nhello from the target\n$/)
  })

  it.skipIf(!asRoot)('closes a connection from another local user unanswered, before routing it', async () => {
    const before = routed.length
    const { stdout } = await run('setpriv', ['--reuid', String(NOBODY), '--regid', String(NOBODY), '--clear-groups', process.execPath, '-e', client((target.address() as net.AddressInfo).port)])
    expect(JSON.parse(stdout)).toBe('')
    expect(routed.length).toBe(before)
  })
})
