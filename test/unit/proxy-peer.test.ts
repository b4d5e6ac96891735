/**
 * forward() listens on the host's 127.0.0.1, where any local user can reach it. The peer
 * check (loopback-peer.ts) finds the owner of a loopback connection in the kernel's tables, so
 * only this process's own user is served. (A sandbox's proxy no longer listens on a port: it is
 * a unix socket, test/security/network-resolver.test.ts.)
 * (Issue 18.)
 */
import { execFile } from 'node:child_process'
import net from 'node:net'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { loopbackPeerUid, peerIsOwnUser } from '../../lib/network/loopback-peer.js'
import { asRoot, nodeAsNobody } from '../helpers/rootless.js'

/** A server that answers only peers of this process's own user; the others are closed unanswered. */
let server: net.Server
let port = 0
beforeAll(async () => {
  server = net.createServer(
    (s) => void peerIsOwnUser(s).then((ok) => (ok ? s.end('hello from the target\n') : s.destroy())),
  )
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()))
  port = (server.address() as net.AddressInfo).port
})
afterAll(() => server.close())

/** A script that connects and prints all it got back before the close. */
const client = () => `
const s = require('net').connect(${port}, '127.0.0.1')
let got = ''
s.on('data', (d) => (got += d))
s.on('error', () => {})
s.on('close', () => console.log(JSON.stringify(got)))
`
const run = promisify(execFile)

describe("a loopback listener's peers", () => {
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
    const { stdout } = await run(process.execPath, ['-e', client()])
    expect(JSON.parse(stdout)).toBe('hello from the target\n')
  })

  it.skipIf(!asRoot)('closes a connection from another local user unanswered', async () => {
    expect(JSON.parse(await nodeAsNobody(client()))).toBe('')
  })
})
