/**
 * A sandbox's egress: its proxy on the listener its relay handed to the host
 * (network-proxy-handoff.test.ts), its resolver on a unix socket in its control directory that
 * the relay carries port 53 to. Whoever reaches them (root in the sandbox; the proxy's entry
 * here is a unix socket in front of the same proxy, as test/helpers/egress.ts makes) gets the
 * sandbox's policy and its bounds, nothing more; they name one sandbox each; and when the host
 * side is gone the sandbox reaches nothing.
 * (Issue 34.)
 */
import { spawn } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import type net from 'node:net'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { RESOLVER_MAX_CONNECTIONS } from '../../lib/network/dns.js'
import { keeperDir, KEEPER_VERB } from '../../lib/network/keeper.js'
import { PROXY_MAX_CONNECTIONS } from '../../lib/network/proxy.js'
import { parseNetworkOption } from '../../lib/network/policy.js'
import { runtimeState, type Runtime, type SandboxCapability } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { askResolver, openUnix, startTestNetwork } from '../helpers/egress.js'
import { connectRequest, hostServices, rawToProxy } from '../helpers/network-attack.js'
import { processesMentioning, testRuntime } from '../helpers/runtime.js'

const ALL_CAPABILITIES: SandboxCapability[] = ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'SETUID', 'SETGID']

let rt: Runtime
let services: Awaited<ReturnType<typeof hostServices>>
let service: { port: number }
let webPort = 0
beforeAll(async () => {
  rt = testRuntime()
  services = await hostServices()
  ;({ secret: service, webPort } = services)
})
afterAll(async () => {
  await rt.close()
  services.close()
})

const closedWith = (s: net.Socket) =>
  new Promise<string>((resolve) => {
    let got = ''
    s.on('data', (d) => (got += d))
    s.on('error', () => {})
    s.once('close', () => resolve(got))
  })

describe("the relay's sockets, spoken to directly", () => {
  it("relay socket: garbage, a non-query and an endless frame on the resolver's socket are refused (closed) and the host serves on", async () => {
    const network = await startTestNetwork(parseNetworkOption({ allow: ['only.test'] })!, null, {
      resolver: { idleTimeoutMs: 300 },
    })
    try {
      // An answer (QR set) where a query belongs: closed at once, so a waiting relay learns there is none.
      expect(
        await askResolver(
          network.dnsPath,
          Buffer.from('00078180000100000000000004616e737704746573740000010001', 'hex'),
        ),
      ).toBeNull()
      // Random bytes framed as a query.
      const answer = await askResolver(network.dnsPath, crypto.randomBytes(40))
      if (answer) expect(answer.readUInt16BE(2) & 0x8000).toBe(0x8000) // at most an error answer
      // A frame that announces 65535 bytes and sends 3: closed when idle, nothing kept.
      const partial = await openUnix(network.dnsPath)
      partial.write(Buffer.from([0xff, 0xff, 1, 2, 3]))
      expect(await closedWith(partial)).toBe('')
      // Garbage on the proxy's socket: closed without a route asked.
      const proxy = await openUnix(network.proxyPath)
      proxy.write(crypto.randomBytes(4096))
      expect(await closedWith(proxy)).toBe('')
      // The sandbox's own query is still answered.
      const ok = await askResolver(
        network.dnsPath,
        Buffer.from('000801000001000000000000036f776e04746573740000010001', 'hex'),
      )
      expect(ok!.readUInt16BE(2) & 0xf).toBe(3) // NXDOMAIN
    } finally {
      await network.close()
    }
  })

  it("relay socket: a flood of connections to the resolver's and the proxy's sockets is held to their caps", async () => {
    const network = await startTestNetwork(parseNetworkOption(true)!)
    const held: net.Socket[] = []
    try {
      for (let i = 0; i < RESOLVER_MAX_CONNECTIONS; i++) held.push(await openUnix(network.dnsPath))
      // Past the cap: closed at once, unanswered.
      const extra = await Promise.all(Array.from({ length: 8 }, () => openUnix(network.dnsPath)))
      expect(await Promise.all(extra.map(closedWith))).toEqual(Array(8).fill(''))
      for (let i = 0; i < PROXY_MAX_CONNECTIONS; i++) held.push(await openUnix(network.proxyPath))
      const more = await Promise.all(Array.from({ length: 8 }, () => openUnix(network.proxyPath)))
      for (const got of await Promise.all(more.map(closedWith)))
        expect(got).toMatch(/^HTTP\/1\.1 503 [^]*too many connections/)
      expect(held.every((s) => !s.destroyed)).toBe(true)
    } finally {
      for (const s of held) s.destroy()
      await network.close()
    }
  })

  it("relay socket: the host's loopback through the proxy's socket, in any spelling, is refused", async () => {
    const network = await startTestNetwork(parseNetworkOption({ allow: ['*', '0.0.0.0/0'] })!)
    try {
      for (const form of [
        `127.0.0.1:${service.port}`,
        `localhost:${service.port}`,
        `[::ffff:127.0.0.1]:${service.port}`,
        `0.0.0.0:${service.port}`,
      ]) {
        const s = await openUnix(network.proxyPath)
        s.write(connectRequest(form))
        const got = await closedWith(s)
        expect(got, form).toMatch(/^HTTP\/1\.1 403 /)
        expect(got, form).not.toContain('SECRET')
      }
    } finally {
      await network.close()
    }
  })
})

describe('in the sandbox', () => {
  it("relay socket: root with all capabilities finding the host sockets by path (control directory, the agent's fds) is refused", async () => {
    const sb = await rt.create({
      image: 'base',
      driver: 'namespace',
      network: { allow: ['only.test'] },
      capabilities: ALL_CAPABILITIES,
    })
    try {
      const r = await sb.exec('sh', [
        '-c',
        'ls /krunbox 2>&1; ls -l /proc/1/fd/ 2>&1; find / -xdev -type s 2>/dev/null; for f in /proc/1/fd/*; do [ -d "$f" ] && ls "$f"; done 2>&1; true',
      ])
      expect(r.stdout + r.stderr).not.toMatch(/proxy\.sock|dns\.sock/)
      // What it can reach is the relay's ports, which carry the sandbox's own policy.
      expect(await rawToProxy(sb, connectRequest(`127.1:${service.port}`))).toMatch(/^HTTP\/1\.1 403 /)
    } finally {
      await sb.stop()
    }
  })

  it('relay socket: garbage and a flood through the relay ports leave the sandbox its network and the host its service', async () => {
    const sb = await rt.create({
      image: 'base',
      driver: 'namespace',
      network: { allow: [`127.0.0.1:${webPort}`], allowHostLoopback: true },
      capabilities: ALL_CAPABILITIES,
    })
    try {
      // 300 connections at once through the proxy port, binary garbage into both ports.
      const flood = await sb.exec(
        'sh',
        [
          '-c',
          'i=0; while [ $i -lt 300 ]; do (head -c 200 /dev/urandom | timeout 5 nc 127.0.0.1 3128 >/dev/null 2>&1 &); i=$((i+1)); done; head -c 3000 /dev/urandom | timeout 5 nc -u 127.0.0.1 53 >/dev/null 2>&1; head -c 70000 /dev/urandom | timeout 5 nc 127.0.0.1 53 >/dev/null 2>&1; wait; true',
        ],
        { timeoutMs: 60_000 },
      )
      expect(flood.exitCode).toBe(0)
      const r = await sb.exec('wget', ['-q', '-O-', `http://127.0.0.1:${webPort}/after`], { timeoutMs: 30_000 })
      expect(r.stdout).toBe('web /after\n')
    } finally {
      await sb.stop()
    }
  })

  it("relay socket: one sandbox reaching another sandbox's policy through its relay is refused", async () => {
    const open = await rt.create({
      image: 'base',
      driver: 'namespace',
      network: services.webPolicy,
    })
    const closed = await rt.create({ image: 'base', driver: 'namespace', network: { allow: ['only.test'] } })
    try {
      expect((await closed.exec('wget', ['-q', '-O-', `http://api.test:${webPort}/stolen`])).stdout).toBe('')
      expect((await closed.exec('nslookup', ['api.test'])).stdout).not.toMatch(/Address:\s+127\.0\.0\.1\s*$/m)
      expect((await open.exec('wget', ['-q', '-O-', `http://api.test:${webPort}/own`])).stdout).toBe('web /own\n')
      // Each sandbox's sockets are its own and counted as its own.
      expect(closed.usage.network!.denied).toBeGreaterThanOrEqual(2)
      expect(closed.usage.network!.allowed).toBe(0)
      expect(open.usage.network).toEqual({ allowed: 1, denied: 0 })
      const ctl = (sb: Sandbox) => runtimeState(rt).controlDir(sb.id)
      expect(fs.statSync(path.join(ctl(open), 'dns.sock')).ino).not.toBe(
        fs.statSync(path.join(ctl(closed), 'dns.sock')).ino,
      )
      // No proxy socket in either: each sandbox's proxy is on the listener it handed over.
      expect(fs.existsSync(path.join(ctl(open), 'proxy.sock'))).toBe(false)
    } finally {
      await Promise.all([open.stop(), closed.stop()])
    }
  })

  it("relay socket: the resolver's socket gone from the control directory leaves the sandbox no lookup (no other way out); its proxy was never there", async () => {
    const sb = await rt.create({
      image: 'base',
      driver: 'namespace',
      detached: true,
      network: services.webPolicy,
    })
    try {
      expect((await sb.exec('wget', ['-q', '-O-', `http://api.test:${webPort}/before`])).stdout).toBe('web /before\n')
      // What the relay finds when the host side is closed: no socket to connect to.
      const ctl = runtimeState(rt).controlDir(sb.id)
      fs.renameSync(path.join(ctl, 'dns.sock'), path.join(runtimeState(rt).sandboxDir(sb.id), 'dns.sock.away'))
      const after = await sb.exec(
        'sh',
        ['-c', `nslookup api.test; echo "nslookup=$?"; wget -q -O- http://api.test:${webPort}/after; echo "wget=$?"`],
        { timeoutMs: 60_000 },
      )
      expect(after.stdout).toMatch(/nslookup=[1-9]/)
      // The proxy's listener was handed to the keeper (network-proxy-handoff.test.ts): no path in the control directory leads to it.
      expect(after.stdout).toContain('web /after')
    } finally {
      await sb.stop()
    }
  })

  it("relay socket: the host side SIGKILLed (a detached sandbox's keeper) leaves the sandbox reaching nothing", async () => {
    const sb = await rt.create({
      image: 'base',
      driver: 'namespace',
      detached: true,
      network: services.webPolicy,
    })
    try {
      expect((await sb.exec('wget', ['-q', '-O-', `http://api.test:${webPort}/before`])).stdout).toBe('web /before\n')
      const [keeper] = processesMentioning(`${KEEPER_VERB}\0${keeperDir(runtimeState(rt).sandboxDir(sb.id))}`)
      expect(keeper).toBeGreaterThan(0)
      const waiter = spawn('tail', ['--pid', String(keeper), '-f', '/dev/null'])
      const gone = new Promise((resolve) => waiter.once('exit', resolve))
      process.kill(keeper, 'SIGKILL')
      await gone
      const after = await sb.exec(
        'sh',
        ['-c', `wget -q -O- http://api.test:${webPort}/after; echo "wget=$?"; nslookup api.test; echo "nslookup=$?"`],
        { timeoutMs: 60_000 },
      )
      expect(after.stdout).not.toContain('web /after')
      expect(after.stdout).toMatch(/wget=[1-9]/)
      expect(after.stdout).toMatch(/nslookup=[1-9]/)
      expect(after.stdout).not.toMatch(/Address:\s+127\.0\.0\.1\s*$/m)
    } finally {
      await sb.stop()
    }
  })
})
