/**
 * An attached sandbox's relay hands its proxy listener to the host over a unix seqpacket pair
 * (lib/network/proxy-handoff.ts, agent/egress/handoff.go), and the host accepts the sandbox's
 * proxy connections itself. The agent is untrusted: whatever it sends instead of its listener is
 * refused and closed, and the host stays up with no fd left behind. The host hands requests for
 * the sandbox's own loopback back without ever waiting on the agent. Root in the sandbox cannot
 * take the proxy port over, and the policy holds on the handed-over listener.
 */
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { receiveListener, sendFd, socketPair } from '../../lib/native.js'
import { handBack } from '../../lib/network/proxy-handoff.js'
import { keeperDir } from '../../lib/network/keeper.js'
import { runtimeState, type Runtime, type SandboxCapability } from '../../lib/runtime.js'
import { SandboxError } from '../../lib/errors.js'
import { hostServices, rawToProxy } from '../helpers/network-attack.js'
import { asRoot, nodeAsNobody } from '../helpers/rootless.js'
import { testRuntime } from '../helpers/runtime.js'

const ALL_CAPABILITIES: SandboxCapability[] = ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'SETUID', 'SETGID']
const openFds = () => fs.readdirSync('/proc/self/fd').length
/** This process's sockets, by inode. */
const openSockets = () =>
  fs.readdirSync('/proc/self/fd').flatMap((fd) => {
    try {
      const link = fs.readlinkSync(`/proc/self/fd/${fd}`)
      return link.startsWith('socket:') ? [link] : []
    } catch {
      return []
    }
  })

/** A listening TCP server on 127.0.0.1 and its fd (the test's stand-in for what a hostile agent could hold). */
async function listening(): Promise<{ server: net.Server; fd: number; port: number }> {
  const server = net.createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()))
  const fd = (server as unknown as { _handle: { fd: number } })._handle.fd
  return { server, fd, port: (server.address() as net.AddressInfo).port }
}

describe('what a hostile agent sends instead of its proxy listener', () => {
  it('handoff: a file, a unix socket, a connected socket, a listener on another port, nothing, or a closed channel: refused and closed', async () => {
    const { server, fd: listenerFd, port } = await listening()
    const client = net.connect(port, '127.0.0.1')
    await new Promise((resolve) => client.once('connect', resolve))
    const clientFd = (client as unknown as { _handle: { fd: number } })._handle.fd
    const before = openFds()
    /** Sends a copy of `fd` (then closes the test's own when it made it). */
    const sending = (open: () => number, own: boolean) => (ch: number) => {
      const fd = open()
      sendFd(ch, fd, Buffer.from('proxy'))
      if (own) fs.closeSync(fd)
    }
    const cases: [string, (channel: number) => void, RegExp][] = [
      ['a file', sending(() => fs.openSync('/dev/null', 'r'), true), /not a socket/],
      [
        'a unix socket',
        (ch) => {
          const [a, b] = socketPair('stream')
          sending(() => a, true)(ch)
          fs.closeSync(b)
        },
        /not an IPv4 socket/,
      ],
      ['a connected TCP socket', sending(() => clientFd, false), /not listening/],
      ['nothing in time', () => {}, /nothing came within 200 ms/],
    ]
    try {
      for (const [what, send, why] of cases) {
        const [host, agent] = socketPair('seqpacket')
        const opened = openFds()
        send(agent)
        const refused = await receiveListener(host, port + 1, 200).catch((err: unknown) => err)
        expect(refused, what).toBeInstanceOf(SandboxError)
        expect((refused as SandboxError).code, what).toBe('S300')
        expect((refused as Error).message, what).toMatch(why)
        fs.closeSync(host)
        fs.closeSync(agent)
        // The fds the case opened to send (closed by the refusal once received) are not the host's to keep.
        expect(openFds(), what).toBeLessThanOrEqual(opened)
      }
      // The right kind of socket, but not on the proxy's port.
      const [host, agent] = socketPair('seqpacket')
      sendFd(agent, listenerFd, Buffer.from('proxy'))
      await expect(receiveListener(host, port + 1, 1000)).rejects.toThrow(`not bound to 127.0.0.1:${port + 1}`)
      // The agent's end closed before sending: refused at once.
      fs.closeSync(agent)
      await expect(receiveListener(host, port, 1000)).rejects.toThrow(/the channel closed/)
      fs.closeSync(host)
      // And the one thing accepted: a TCP listener on 127.0.0.1 at the port asked for.
      const [host2, agent2] = socketPair('seqpacket')
      sendFd(agent2, listenerFd, Buffer.from('proxy'))
      const got = await receiveListener(host2, port, 1000)
      expect(got).toBeGreaterThan(2)
      fs.closeSync(got)
      fs.closeSync(host2)
      fs.closeSync(agent2)
    } finally {
      client.destroy()
      server.close()
    }
    expect(openFds()).toBeLessThanOrEqual(before)
  })

  it('handoff: an agent that never reads what the host hands back: the hand-back fails (an Error, not a throw), nothing blocks, no fd is left', () => {
    const [host, agent] = socketPair('seqpacket')
    const before = openFds()
    const request = Buffer.from(`GET http://127.0.0.1:8080/ HTTP/1.1\r\n\r\n${'x'.repeat(60_000)}`)
    let failed: Error | null = null
    const taken: net.Socket[] = []
    for (let i = 0; i < 10_000 && !failed; i++) {
      const back = handBack(host, request)
      if (back instanceof Error) failed = back
      else taken.push(back)
    }
    expect(failed).toBeInstanceOf(SandboxError)
    expect((failed as SandboxError).details?.errnoName).toMatch(/^(EAGAIN|EWOULDBLOCK)$/)
    // A request too large for the relay to read is not sent at all.
    expect(handBack(host, Buffer.alloc(200 * 1024))).toBeInstanceOf(Error)
    for (const s of taken) s.destroy()
    fs.closeSync(agent)
    fs.closeSync(host)
    expect(openFds()).toBeLessThan(before)
  })
})

describe('an attached sandbox with a policy', () => {
  let rt: Runtime
  let services: Awaited<ReturnType<typeof hostServices>>
  let secret: { port: number }
  let webPort = 0
  beforeAll(async () => {
    rt = testRuntime()
    services = await hostServices()
    ;({ secret, webPort } = services)
  })
  afterAll(async () => {
    await rt.close()
    services.close()
  })

  it('handoff: root with every capability cannot take the proxy port over, and the policy holds on the handed-over listener', async () => {
    // The runtime's own first-use fds (its exit watcher, its state) are not the sandbox's.
    await (await rt.create({ image: 'base', driver: 'namespace', network: { allow: [] } })).stop()
    const before = openSockets()
    const sb = await rt.create({
      image: 'base',
      driver: 'namespace',
      capabilities: ALL_CAPABILITIES,
      network: services.webPolicy,
    })
    try {
      const grab = await sb.exec('sh', ['-c', 'timeout 2 nc -l -p 3128 127.0.0.1; echo "nc=$?"'])
      expect(grab.stdout + grab.stderr).toMatch(/in use/i)
      expect((await sb.exec('wget', ['-q', '-O-', `http://api.test:${webPort}/ok`])).stdout).toBe('web /ok\n')
      // 2130706433 is the host's 127.0.0.1 to the host's policy (the sandbox's own loopback only as written 127.x).
      const denied = await rawToProxy(sb, `GET http://2130706433:${secret.port}/ HTTP/1.1\r\nHost: x\r\n\r\n`)
      expect(denied).toMatch(/^HTTP\/1\.1 403 /)
      expect(denied).not.toContain('SECRET')
    } finally {
      await sb.stop()
    }
    // The handoff pair and the listener went with the sandbox (the runtime's clean-up of its files may still run).
    expect(openSockets().filter((s) => !before.includes(s))).toEqual([])
  })

  it('handoff: with the sandbox burning every CPU it has, 64 proxied requests at once are each answered, the allowed by the server, the refused by the policy', async () => {
    const sb = await rt.create({ image: 'base', driver: 'namespace', network: services.webPolicy })
    try {
      const burners = [1, 2].map(() => sb.start('sh', ['-c', 'while :; do :; done']))
      const r = await sb.exec(
        'sh',
        [
          '-c',
          `for i in $(seq 32); do wget -q -O- http://api.test:${webPort}/b$i & wget -q -O- http://other.test:${webPort}/ 2>&1 & done; wait`,
        ],
        { timeoutMs: 120_000 },
      )
      const lines = r.stdout.split('\n')
      expect(lines.filter((l) => /^web \/b\d+$/.test(l))).toHaveLength(32)
      expect((r.stdout + r.stderr).match(/403/g)).toHaveLength(32)
      await Promise.all(burners.map((b) => b.kill('SIGKILL').catch(() => {})))
    } finally {
      await sb.stop()
    }
  })

  it('handoff: 64 requests at once for the sandbox’s own loopback are handed back and served there, none by the host; a large answer comes whole', async () => {
    const sb = await rt.create({ image: 'base', driver: 'namespace', network: { allow: [] } })
    try {
      const httpd = sb.start('sh', [
        '-c',
        `mkdir -p /tmp/www && echo own > /tmp/www/index.html && head -c 8388608 /dev/urandom > /tmp/www/big && httpd -f -p 127.0.0.1:${secret.port} -h /tmp/www & until grep -qE ":${secret.port.toString(16).toUpperCase().padStart(4, '0')} 0+:0000 0A" /proc/net/tcp; do :; done; echo listening; wait`,
      ])
      await new Promise<void>((resolve) => httpd.on('log', (c) => c.data.toString().includes('listening') && resolve()))
      // The same port as the host's secret service: only the sandbox's own answer may come back.
      const r = await sb.exec('sh', [
        '-c',
        `for i in $(seq 64); do wget -q -O- http://127.0.0.1:${secret.port}/ & done; wait`,
      ])
      expect(r.stdout.split('\n').filter((l) => l === 'own')).toHaveLength(64)
      expect(r.stdout).not.toContain('SECRET')
      // The answer's end passes through the hand-back: all of it arrives before the client is closed.
      const big = await sb.exec('sh', [
        '-c',
        // nc half-closes once its request is sent: the answer must still come whole.
        `wget -q -O- http://127.0.0.1:${secret.port}/big | md5sum; printf 'GET http://127.0.0.1:${secret.port}/big HTTP/1.0\\r\\n\\r\\n' | nc 127.0.0.1 3128 | tail -c 8388608 | md5sum; md5sum < /tmp/www/big`,
      ])
      const [viaWget, viaNc, want] = big.stdout.trim().split('\n')
      expect(viaWget).toBe(want)
      expect(viaNc).toBe(want)
      await httpd.kill('SIGKILL').catch(() => {})
    } finally {
      await sb.stop()
    }
  })

  it.skipIf(!asRoot)(
    'handoff: a detached sandbox’s handoff end goes to the keeper, whose handoff.sock another local user cannot reach',
    async () => {
      const sb = await rt.create({
        image: 'base',
        driver: 'namespace',
        detached: true,
        network: services.webPolicy,
      })
      try {
        // The keeper accepts on the handed-over listener: the policy holds there too.
        expect((await sb.exec('wget', ['-q', '-O-', `http://api.test:${webPort}/kept`])).stdout).toBe('web /kept\n')
        const denied = await rawToProxy(sb, `GET http://2130706433:${secret.port}/ HTTP/1.1\r\nHost: x\r\n\r\n`)
        expect(denied).toMatch(/^HTTP\/1\.1 403 /)
        const inbox = path.join(keeperDir(runtimeState(rt).sandboxDir(sb.id)), 'handoff.sock')
        expect(fs.statSync(inbox).mode & 0o777).toBe(0o600)
        const script = `require('net').connect(process.argv[1]).on('error', (e) => console.log(e.code)).on('connect', () => console.log('connected'))`
        expect((await nodeAsNobody(script, [inbox])).trim()).toBe('EACCES')
      } finally {
        await sb.stop()
      }
    },
  )
})
