/**
 * A sandbox's resolver runs in the host process. It must not
 * starve the host application's own name lookups (dns.lookup shares libuv's small threadpool),
 * must bound what one sandbox has in flight, and must not answer other local users (it listens on
 * a unix socket only the sandbox's ids may connect to, no longer on a port of 127.0.0.1).
 * (Issue 28, item 8 (the brief's 4).)
 */
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { describe, expect, it } from 'vitest'
import { MAX_LOOKUPS_IN_FLIGHT } from '../../lib/network/lookups.js'
import { parseNetworkOption } from '../../lib/network/policy.js'
import { askResolver, startTestNetwork } from '../helpers/egress.js'
import { asRoot, nodeAsNobody } from '../helpers/rootless.js'

const FLOOD_CHILD = path.resolve('test/fixtures/network-resolver-flood-child.ts')

describe('the sandbox resolver', () => {
  it.skipIf(!asRoot)(
    "resolver: a flood of lookups that never answer starving the host's own dns.lookup is held",
    async () => {
      // A private mount and network namespace, where the only name server is one that never replies.
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-resolver-flood-'))
      const resolvConf = path.join(dir, 'resolv.conf')
      fs.writeFileSync(resolvConf, 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n')
      const queries = MAX_LOOKUPS_IN_FLIGHT + 24
      try {
        const { stdout } = await promisify(execFile)(
          'unshare',
          [
            '--mount',
            '--net',
            'sh',
            '-c',
            'ip link set lo up && mount --bind "$1" /etc/resolv.conf && shift && exec "$@"',
            'sh',
            resolvConf,
            process.execPath,
            '--import',
            'tsx',
            FLOOD_CHILD,
            String(queries),
          ],
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
    },
  )

  it.skipIf(!asRoot)(
    "resolver: another local user (nobody) connecting to a sandbox's resolver or proxy socket is refused",
    async () => {
      // Whatever the umask, the sockets are the sandbox's root's alone (0600): with 0 they would be 0777.
      const umask = process.umask(0)
      const network = await startTestNetwork(parseNetworkOption({ allow: ['only.test'] })!).finally(() =>
        process.umask(umask),
      )
      try {
        // The directory is traversable, so the socket's own mode is what holds (as root's 0700 parents did too).
        fs.chmodSync(network.dir, 0o755)
        fs.chmodSync(path.dirname(network.dnsPath), 0o755)
        const script = `
        const net = require('net')
        const q = Buffer.from('0024000701000001000000000000056f746865720474657374000001000' + '1', 'hex')
        const tryOne = (p) => new Promise((resolve) => {
          const s = net.connect(p, () => { s.write(q); s.on('data', () => resolve('answered')); s.on('close', () => resolve('closed')) })
          s.on('error', (e) => resolve(e.code))
        })
        Promise.all(process.argv.slice(1).map(tryOne)).then((r) => console.log(JSON.stringify(r)))
      `
        // (The proxy has no socket on the host's side: it accepts on the sandbox's own listener.)
        const stdout = await nodeAsNobody(script, [network.dnsPath])
        expect(JSON.parse(stdout.trim())).toEqual(['EACCES'])
        // The sandbox's own (here: this user's) query for a refused name is answered: the only refusal counted.
        const answer = await askResolver(
          network.dnsPath,
          Buffer.from('000801000001000000000000036f776e04746573740000010001', 'hex'),
        )
        expect(answer!.readUInt16BE(2) & 0xf).toBe(3) // NXDOMAIN
        expect(network.usage().denied).toBe(1)
      } finally {
        await network.close()
      }
    },
  )
})
