/**
 * Issue 28, item 8 (the brief's 4): a sandbox's resolver runs in the host process. It must not
 * starve the host application's own name lookups (dns.lookup shares libuv's small threadpool),
 * must bound what one sandbox has in flight, and must not answer other local users, who can all
 * send to its port on 127.0.0.1.
 */
import { execFile, spawn } from 'node:child_process'
import dgram from 'node:dgram'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { describe, expect, it } from 'vitest'
import { SandboxNetwork } from '../../lib/network/gateway.js'
import { MAX_LOOKUPS_IN_FLIGHT } from '../../lib/network/lookups.js'
import { parseNetworkOption } from '../../lib/network/policy.js'
import { asRoot, NOBODY } from '../helpers/rootless.js'

const FLOOD_CHILD = path.resolve('test/fixtures/network-resolver-flood-child.ts')

describe('the sandbox resolver', () => {
  it.skipIf(!asRoot)("resolver: a flood of lookups that never answer starving the host's own dns.lookup is held", async () => {
    // A private mount and network namespace, where the only name server is one that never replies.
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-resolver-flood-'))
    const resolvConf = path.join(dir, 'resolv.conf')
    fs.writeFileSync(resolvConf, 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n')
    const queries = MAX_LOOKUPS_IN_FLIGHT + 24
    try {
      const { stdout } = await promisify(execFile)(
        'unshare',
        ['--mount', '--net', 'sh', '-c', 'ip link set lo up && mount --bind "$1" /etc/resolv.conf && shift && exec "$@"', 'sh', resolvConf, process.execPath, '--import', 'tsx', FLOOD_CHILD, String(queries)],
        { timeout: 120_000 },
      )
      const { events } = JSON.parse(stdout.trim().split('\n').pop()!) as { events: string[] }
      // The host's lookup is answered before any lookup the sandbox sent upstream.
      const hostDone = events.indexOf('host-lookup:done')
      const firstUpstreamAnswer = events.findIndex((e) => e.startsWith('answer:') && e !== 'answer:refused')
      expect(hostDone, events.join(' ')).toBeGreaterThanOrEqual(0)
      expect(hostDone, events.join(' ')).toBeLessThan(firstUpstreamAnswer)
      // Past its cap the sandbox is refused at once; what went upstream failed (SERVFAIL).
      expect(events.filter((e) => e === 'answer:refused')).toHaveLength(queries - MAX_LOOKUPS_IN_FLIGHT)
      expect(events.filter((e) => e === 'answer:servfail')).toHaveLength(MAX_LOOKUPS_IN_FLIGHT)
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })

  it.skipIf(!asRoot)('resolver: a query from another local user is dropped unanswered', async () => {
    const network = await SandboxNetwork.start(parseNetworkOption({ allow: ['only.test'] })!, null)
    try {
      // nobody asks (for a refused name: answering it would count a refusal), and waits.
      const script = `
        const s = require('dgram').createSocket('udp4')
        let answered = false
        s.on('message', () => (answered = true))
        const q = Buffer.from('00070100000100000000000005646f6e6f7404746573740000010001', 'hex')
        s.send(q, ${network.dnsPort}, '127.0.0.1', () => console.log('sent'))
        process.stdin.on('end', () => { console.log(JSON.stringify({ answered })); process.exit(0) })
        process.stdin.resume()
      `
      const child = spawn('setpriv', ['--reuid', String(NOBODY), '--regid', String(NOBODY), '--clear-groups', process.execPath, '-e', script], { stdio: ['pipe', 'pipe', 'inherit'] })
      let out = ''
      const sent = new Promise<void>((resolve) => child.stdout.on('data', (d) => ((out += d), out.includes('sent') && resolve())))
      const exited = new Promise((resolve) => child.once('exit', resolve))
      await sent
      // Then our own user asks for a refused name: its answer comes after nobody's would have.
      const own = dgram.createSocket('udp4')
      const answer = new Promise<Buffer>((resolve) => own.once('message', resolve))
      own.send(Buffer.from('000801000001000000000000036f776e04746573740000010001', 'hex'), network.dnsPort, '127.0.0.1')
      expect((await answer).readUInt16BE(2) & 0xf).toBe(3) // NXDOMAIN
      own.close()
      expect(network.usage().denied).toBe(1) // ours alone
      child.stdin.end()
      await exited
      expect(JSON.parse(out.trim().split('\n').pop()!)).toEqual({ answered: false })
    } finally {
      await network.close()
    }
  })
})
