/**
 * A sandbox's host-side network outside any sandbox, for tests: its resolver's socket in a fresh
 * control directory, its proxy reached through a unix socket beside it (`proxyPath`: each
 * connection served as one on the handed-over listener would be), and clients that speak to
 * them as the sandbox's programs and relay (agent/egress) do.
 */
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { SandboxNetwork } from '../../lib/network/gateway.js'
import type { NetworkPolicy } from '../../lib/network/policy.js'

export async function startTestNetwork(
  policy: NetworkPolicy,
  cap: NetworkPolicy | null = null,
  options: Parameters<typeof SandboxNetwork.start>[3] = {},
): Promise<SandboxNetwork & { dir: string; proxyPath: string }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-egress-'))
  const controlDir = path.join(dir, 'ctl')
  fs.mkdirSync(controlDir, { mode: 0o700 })
  const network = await SandboxNetwork.start(policy, cap, { controlDir, stagingDir: dir }, options)
  const proxyPath = path.join(controlDir, 'proxy.sock')
  const entry = net.createServer({ allowHalfOpen: true }, (client) => network.serveProxyConnection(client))
  await new Promise<void>((resolve) => entry.listen(proxyPath, resolve))
  const close = network.close.bind(network)
  network.close = async () => {
    await new Promise((resolve) => entry.close(resolve))
    await close()
    fs.rmSync(dir, { recursive: true, force: true })
  }
  return Object.assign(network, { dir, proxyPath })
}

/** A connection to a unix socket, once connected. */
export function openUnix(socketPath: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect(socketPath, () => resolve(s))
    s.once('error', reject)
  })
}

/** One DNS query as the relay sends it (its 2-byte length first); the answer, or null when the connection closed without one. */
export async function askResolver(dnsPath: string, query: Buffer): Promise<Buffer | null> {
  const s = await openUnix(dnsPath)
  return new Promise((resolve) => {
    let got = Buffer.alloc(0)
    s.on('data', (d: Buffer) => {
      got = Buffer.concat([got, d])
      if (got.length >= 2 && got.length >= 2 + got.readUInt16BE(0)) {
        s.destroy()
        resolve(got.subarray(2, 2 + got.readUInt16BE(0)))
      }
    })
    s.on('error', () => {})
    s.once('close', () => resolve(null))
    const head = Buffer.alloc(2)
    head.writeUInt16BE(query.length)
    s.write(Buffer.concat([head, query]))
  })
}

/** A DNS query for `name` (type A) with id `id`. */
export function dnsQuery(id: number, name: string): Buffer {
  const header = Buffer.alloc(12)
  header.writeUInt16BE(id, 0)
  header.writeUInt16BE(0x0100, 2)
  header.writeUInt16BE(1, 4)
  const labels = name.split('.').map((l) => Buffer.concat([Buffer.from([l.length]), Buffer.from(l)]))
  return Buffer.concat([header, ...labels, Buffer.from([0, 0, 1, 0, 1])])
}
