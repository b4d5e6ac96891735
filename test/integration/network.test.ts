/**
 * A sandbox's network is its own. With a policy, the only way out is the host's
 * proxy and resolver, which let through what the policy allows and refuse (and count, and
 * report) the rest; the host's loopback, ports and interfaces stay out of reach.
 * Every server here listens on this machine's 127.0.0.1; no test sends a packet anywhere else
 * (a refused destination is refused by the proxy before any connection is tried).
 * (Issue 18.)
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import path from 'node:path'
import readline from 'node:readline'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import type { NetworkDenial } from '../../lib/network/gateway.js'
import { KEEPER_VERB, keeperDir } from '../../lib/network/keeper.js'
import { PolicyMatcher, parseNetworkOption } from '../../lib/network/policy.js'
import { runtimeState, type Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { asNobody, asRoot, checkoutUnreachable } from '../helpers/rootless.js'
import { processesMentioning, testRuntime } from '../helpers/runtime.js'

let rt: Runtime
const servers: http.Server[] = []

/** A host server on 127.0.0.1 that says who it is. */
async function server(name: string): Promise<number> {
  const s = http.createServer((req, res) => res.end(`${name} ${req.method} ${req.url}\n`))
  servers.push(s)
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', () => resolve()))
  return (s.address() as net.AddressInfo).port
}

let portA: number
let portB: number
beforeAll(async () => {
  rt = testRuntime()
  portA = await server('A')
  portB = await server('B')
})
afterAll(async () => {
  await rt.close()
  for (const s of servers) s.close()
})

/** The processes this test process started (its children), by pid. */
function ourChildren(): number[] {
  const out: number[] = []
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8')
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === process.pid) out.push(Number(name))
    } catch {}
  }
  return out
}

function interfaces(procNetDev: string): string[] {
  return procNetDev
    .split('\n')
    .slice(2)
    .map((l) => l.split(':')[0].trim())
    .filter(Boolean)
    .sort()
}

/** Runs a shell line in the sandbox; returns stdout + stderr and the exit code. */
async function sh(
  sb: Sandbox,
  line: string,
  env?: Record<string, string>,
): Promise<{ out: string; code: number | null }> {
  const r = await sb.exec('sh', ['-c', line], { timeoutMs: 20_000, env })
  return { out: r.stdout + r.stderr, code: r.exitCode }
}

/** A round trip through sb.connect() to a busybox `nc -e cat` inside (forwarding does not use the sandbox's network). */
async function echoThroughPort(sb: Sandbox, port: number): Promise<string> {
  const server = sb.start('nc', ['-l', '-p', String(port), '-e', 'cat'])
  try {
    // nc listens a moment after it starts: S230 (nothing listening yet) is asked again.
    for (let attempt = 0; ; attempt++) {
      try {
        const socket = await sb.connect(port)
        socket.end('through the agent\n')
        let got = ''
        for await (const chunk of socket) got += chunk
        return got
      } catch (err) {
        if (!(err instanceof SandboxError && err.code === 'S230') || attempt > 500) throw err
      }
    }
  } finally {
    await server.kill('SIGKILL').catch(() => {})
  }
}

describe('network: false (the default)', () => {
  it('has only its own loopback: no interface of the host, no route, the host server unreachable', async () => {
    const sb = await rt.create({ image: 'base', driver: 'namespace' })
    try {
      expect(sb.network).toBeNull()
      expect(interfaces((await sh(sb, 'cat /proc/net/dev')).out)).toEqual(['lo'])
      const r = await sh(sb, `wget -q -T 5 -O- http://127.0.0.1:${portA}/`)
      expect(r.code).not.toBe(0)
      expect(r.out).not.toContain('A GET')
      expect(sb.usage.network).toBeNull()
    } finally {
      await sb.stop()
    }
  })
})

describe('a policy that allows one name', () => {
  let sb: Sandbox
  const denials: NetworkDenial[] = []
  let childrenWhileUp: number[] = []
  let dnsSocket = ''
  beforeAll(async () => {
    const before = new Set(ourChildren())
    // A name pinned to the host's loopback opens only the port its allow entry names.
    sb = await rt.create({
      image: 'base',
      driver: 'namespace',
      network: { allow: [`api.test:${portA}`], hosts: { 'api.test': '127.0.0.1' }, allowHostLoopback: true },
    })
    sb.on('network-denied', (d) => denials.push(d))
    childrenWhileUp = ourChildren().filter((p) => !before.has(p))
    dnsSocket = path.join(runtimeState(rt).controlDir(sb.id), 'dns.sock')
  })
  afterAll(async () => {
    if (sb.status !== 'destroyed') await sb.stop()
  })

  const nextDenial = () => new Promise<NetworkDenial>((resolve) => sb.once('network-denied', resolve))

  it('fetches from the allowed name, through the proxy the sandbox is pointed at', async () => {
    const r = await sh(sb, `wget -q -O- http://api.test:${portA}/hello`)
    expect(r).toEqual({ out: 'A GET /hello\n', code: 0 })
    expect(sb.network).toMatchObject({ allow: [`api.test:${portA}`], allowHostLoopback: true })
    expect(sb.usage.network?.allowed).toBeGreaterThanOrEqual(1)
  })

  it('refuses a name outside the list at once, with the destination in the event', async () => {
    const denied = nextDenial()
    const r = await sh(sb, `wget -q -O- http://other.test:${portB}/`)
    expect(r.code).not.toBe(0)
    expect(r.out).toContain('403')
    expect(await denied).toMatchObject({
      destination: `other.test:${portB}`,
      via: 'proxy',
      reason: expect.stringContaining('not in the allow list'),
    })
  })

  it("refuses the host's loopback by address, through the proxy and around it", async () => {
    const denied = nextDenial()
    // 127.1 is not a spelling the relay keeps in the sandbox: the host's proxy refuses it.
    const viaProxy = await sh(sb, `wget -q -O- http://127.1:${portB}/`)
    expect(viaProxy.code).not.toBe(0)
    expect(await denied).toMatchObject({
      destination: `127.0.0.1:${portB}`,
      reason: expect.stringContaining("host's loopback"),
    })
    // 127.0.0.1 through the proxy is the sandbox's own loopback (busybox wget ignores no_proxy), where nothing listens on that port.
    const own = await sh(sb, `wget -q -O- http://127.0.0.1:${portB}/`)
    expect(own.code).not.toBe(0)
    expect(own.out).toContain('502')
    expect(own.out).not.toContain('B GET')
    // Without the proxy, 127.0.0.1 is the sandbox's own loopback, where nothing listens.
    const direct = await sh(sb, `wget -q -T 5 -O- http://127.0.0.1:${portA}/`, { http_proxy: '', no_proxy: '*' })
    expect(direct.code).not.toBe(0)
    expect(direct.out).not.toContain('A GET')
  })

  it('resolves the allowed name and no other; the refused lookup is reported', async () => {
    const ok = await sh(sb, 'nslookup api.test')
    expect(ok.code).toBe(0)
    expect(ok.out).toMatch(/Address:\s+127\.0\.0\.1\s*$/m)
    const denied = nextDenial()
    const no = await sh(sb, 'nslookup other.test')
    expect(no.code).not.toBe(0)
    expect(no.out).toContain('NXDOMAIN')
    expect(await denied).toMatchObject({ destination: 'other.test', via: 'dns' })
  })

  it('reaches a server on its own loopback through the proxy variables, although busybox wget ignores no_proxy', async () => {
    const server = sb.start('sh', [
      '-c',
      'mkdir -p /tmp/www && echo own-loopback > /tmp/www/index.html && httpd -f -p 127.0.0.1:8080 -h /tmp/www & until grep -qE ":1F90 0+:0000 0A" /proc/net/tcp; do :; done; echo listening; wait',
    ])
    try {
      await new Promise<void>((resolve) =>
        server.on('log', (c) => c.data.toString().includes('listening') && resolve()),
      )
      expect(await sh(sb, 'wget -q -O- http://127.0.0.1:8080/index.html')).toEqual({ out: 'own-loopback\n', code: 0 })
      expect((await sh(sb, 'wget -q -O- http://localhost:8080/index.html')).out).toBe('own-loopback\n')
    } finally {
      await server.kill('SIGKILL').catch(() => {})
    }
  })

  it("has no route out and no interface of the host's; a port bound inside is not a port of the host", async () => {
    expect(interfaces((await sh(sb, 'cat /proc/net/dev')).out)).toEqual(['lo'])
    expect((await sh(sb, 'cat /proc/net/route')).out.trim().split('\n')).toHaveLength(1) // the header alone
    // A listener inside on a port free on the host: the host still finds nothing there.
    const probe = net.createServer()
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', () => resolve()))
    const port = (probe.address() as net.AddressInfo).port
    await new Promise<void>((resolve) => probe.close(() => resolve()))
    const hex = port.toString(16).toUpperCase().padStart(4, '0')
    const listener = sb.start('sh', [
      '-c',
      `nc -l -p ${port} & until cat /proc/net/tcp /proc/net/tcp6 | grep -qE ':${hex} 0+:0000 0A'; do :; done; echo listening; wait`,
    ])
    await new Promise<void>((resolve) =>
      listener.on('log', (c) => c.data.toString().includes('listening') && resolve()),
    )
    const err = await new Promise<NodeJS.ErrnoException | null>((resolve) => {
      const c = net.connect(port, '127.0.0.1')
      c.once('connect', () => (c.destroy(), resolve(null)))
      c.once('error', resolve)
    })
    expect(err?.code).toBe('ECONNREFUSED')
    await listener.cancel({ mode: 'force' })
  })

  it("forwards a port with the policy in place (sb.connect goes through the agent, not the sandbox's network)", async () => {
    expect(await echoThroughPort(sb, 7070)).toBe('through the agent\n')
  })

  it('counts every refusal it reported; a policy starts no process of its own, and its sockets close at stop', async () => {
    expect(sb.usage.network?.denied).toBe(denials.length)
    expect(denials.length).toBeGreaterThanOrEqual(3)
    // As many processes as a sandbox without a policy (a pasta used to join it).
    const before = new Set(ourChildren())
    const plain = await rt.create({ image: 'base', driver: 'namespace' })
    const plainChildren = ourChildren().filter((p) => !before.has(p))
    await plain.stop()
    expect(childrenWhileUp).toHaveLength(plainChildren.length)
    expect(fs.statSync(dnsSocket).isSocket()).toBe(true)
    await sb.stop()
    const err = await new Promise<NodeJS.ErrnoException | null>((resolve) => {
      const c = net.connect(dnsSocket, () => (c.destroy(), resolve(null)))
      c.once('error', resolve)
    })
    expect(err?.code).toMatch(/^(ENOENT|ECONNREFUSED)$/)
  })
})

describe('a detached sandbox', () => {
  it("keeps its policy after the process that created it is gone, in the state directory's one keeper, which ends once it holds no sandbox", async () => {
    // The creator: another host process, SIGKILLed once the sandbox is up.
    const policy = { allow: [`api.test:${portA}`], hosts: { 'api.test': '127.0.0.1' }, allowHostLoopback: true }
    const creator = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        path.resolve('test/fixtures/runtime-child.ts'),
        'create',
        runtimeState(rt).root,
        JSON.stringify({ image: 'base', driver: 'namespace', detached: true, network: policy }),
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    )
    const [line] = await readline
      .createInterface({ input: creator.stdout })
      [Symbol.asyncIterator]()
      .next()
      .then((r) => [r.value as string])
    const { id, accessToken } = JSON.parse(line)
    creator.kill('SIGKILL')
    await new Promise((resolve) => creator.once('exit', resolve))

    // The keeper's command line names its state directory's keeper directory.
    const keepers = processesMentioning(`${KEEPER_VERB}\0${keeperDir(runtimeState(rt).sandboxDir(id))}`)
    expect(keepers).toHaveLength(1)
    const sb = await rt.attach(id, { accessToken })
    expect(await sh(sb, `wget -q -O- http://api.test:${portA}/kept`)).toEqual({ out: 'A GET /kept\n', code: 0 })
    const refused = await sh(sb, `wget -q -O- http://other.test:${portB}/`)
    expect(refused.out).toContain('403')
    const usage = JSON.parse(fs.readFileSync(path.join(runtimeState(rt).sandboxDir(id), 'network-usage.json'), 'utf8'))
    expect(usage).toEqual({ allowed: 1, denied: 1 })

    // The keeper is not our child: coreutils tail waits for any pid to end.
    const waiter = spawn('tail', ['--pid', String(keepers[0]), '-f', '/dev/null'])
    const keeperGone = new Promise((resolve) => waiter.once('exit', resolve))
    await sb.stop()
    await keeperGone
    expect(processesMentioning(KEEPER_VERB).filter((p) => keepers.includes(p))).toEqual([])
  })
})

describe('detached sandboxes created at once', () => {
  it('8 detached creates with a policy at once, in a state directory with no keeper yet, start one keeper that serves them all', async () => {
    const fresh = testRuntime()
    try {
      const policy = { allow: [`api.test:${portA}`], hosts: { 'api.test': '127.0.0.1' }, allowHostLoopback: true }
      const list = await Promise.all(
        Array.from({ length: 8 }, () =>
          fresh.create({ image: 'base', driver: 'namespace', detached: true, network: policy }),
        ),
      )
      const keepers = processesMentioning(`${KEEPER_VERB}\0${keeperDir(runtimeState(fresh).sandboxDir(list[0].id))}`)
      expect(keepers, keepers.map((p) => fs.readFileSync(`/proc/${p}/stat`, 'utf8')).join(' | ')).toHaveLength(1)
      const got = await Promise.all(list.map((sb, i) => sh(sb, `wget -q -O- http://api.test:${portA}/${i}`)))
      expect(got).toEqual(list.map((_, i) => ({ out: `A GET /${i}\n`, code: 0 })))
      await Promise.all(list.map((sb) => sb.stop()))
    } finally {
      await fresh.close()
    }
  })
})

describe('network: true and allowHostLoopback', () => {
  it('network: true reaches no host loopback and no private range (refused before any connection)', async () => {
    const sb = await rt.create({ image: 'base', driver: 'namespace', network: true })
    try {
      const denials: NetworkDenial[] = []
      sb.on('network-denied', (d) => denials.push(d))
      for (const url of [`http://127.1:${portA}/`, 'http://10.1.2.3:80/', 'http://169.254.169.254/']) {
        const r = await sh(sb, `wget -q -O- ${url}`)
        expect(r.code).not.toBe(0)
        expect(r.out).toContain('403')
      }
      expect(denials.map((d) => d.destination)).toEqual([`127.0.0.1:${portA}`, '10.1.2.3:80', '169.254.169.254:80'])
      // 127.0.0.1 itself is the sandbox's own loopback, where nothing listens on that port.
      const own = await sh(sb, `wget -q -O- http://127.0.0.1:${portA}/`)
      expect(own.out).toContain('502')
      expect(own.out).not.toContain('A GET')
    } finally {
      await sb.stop()
    }
  })

  it('allowHostLoopback opens the loopback port the allow list names, and nothing else', async () => {
    const sb = await rt.create({
      image: 'base',
      driver: 'namespace',
      network: { allow: [`127.0.0.1:${portB}`], allowHostLoopback: true },
    })
    try {
      expect(await sh(sb, `wget -q -O- http://127.0.0.1:${portB}/x`)).toEqual({ out: 'B GET /x\n', code: 0 })
      // Another port of 127.0.0.1 is the sandbox's own loopback (nothing there); of the host's, by another spelling: refused.
      expect((await sh(sb, `wget -q -O- http://127.0.0.1:${portA}/`)).out).toMatch(/502(?![^]*A GET)/)
      expect((await sh(sb, `wget -q -O- http://127.1:${portA}/`)).out).toContain('403')
      expect((await sh(sb, `wget -q -O- http://other.test:${portB}/`)).code).not.toBe(0)
    } finally {
      await sb.stop()
    }
  })
})

describe('as an unprivileged host user', () => {
  it.skipIf(!asRoot || checkoutUnreachable !== null)(
    "the relay serves the user's sandbox: the policy holds the same way",
    async () => {
      const { result, cleanup } = await asNobody('network-rootless-child.ts')
      cleanup()
      expect(result).toMatchObject({ uid: 65534, allowed: 'A GET /rootless\n', usage: { allowed: 1, denied: 1 } })
      expect(result.refusedCode).not.toBe(0)
      expect(result.refused).toContain('403')
    },
  )
})

describe('validation and the runtime cap (no sandbox boots)', () => {
  const code = async (p: Promise<unknown>) => {
    try {
      await p
    } catch (err) {
      return { code: (err as SandboxError).code, message: (err as Error).message }
    }
    return null
  }

  it('a bad entry is S001 naming it', async () => {
    for (const [network, named] of [
      [{ allow: ['exa mple.com'] }, '"exa mple.com"'],
      [{ allow: ['10.0.0.0/33'] }, '"10.0.0.0/33"'],
      [{ deny: ['host:99999'] }, '"host:99999"'],
      [{ allow: 'api.test' }, 'network.allow'],
      [{ allow: ['a.test'], hosts: { 'b.test': '127.0.0.1' } }, '"b.test"'],
      [{ allow: ['a.test'], hosts: { 'a.test': 'nope' } }, '"nope"'],
      [{ allowHostLoopback: 'yes' }, 'allowHostLoopback'],
      [{ alow: [] }, '"alow"'],
      ['yes', 'network'],
    ] as const) {
      const r = await code(rt.create({ image: 'base', driver: 'namespace', network: network as never }))
      expect(r?.code, JSON.stringify(network)).toBe('S001')
      expect(r?.message).toContain(named)
    }
  })

  it('networkAllowlist caps what a sandbox may ask for, fail closed (S110); a bad entry is S103', async () => {
    expect(() => testRuntime({ networkAllowlist: ['not a host'] })).toThrow(expect.objectContaining({ code: 'S103' }))
    const closed = testRuntime({ networkAllowlist: [] })
    const capped = testRuntime({ networkAllowlist: ['*.example.test', '10.0.0.0/8'] })
    try {
      expect(await code(closed.create({ network: { allow: ['a.test'] } }))).toMatchObject({ code: 'S110' })
      expect(await code(capped.create({ network: true }))).toMatchObject({
        code: 'S110',
        message: expect.stringContaining('"*"'),
      })
      expect(await code(capped.create({ network: { allow: ['other.test'] } }))).toMatchObject({
        code: 'S110',
        message: expect.stringContaining('"other.test"'),
      })
      expect(
        await code(capped.create({ network: { allow: ['127.0.0.1:80'], allowHostLoopback: true } })),
      ).toMatchObject({ code: 'S110' })
      expect(await code(capped.create({ network: { allowHostLoopback: true } }))).toMatchObject({
        code: 'S001',
        message: expect.stringContaining('names none'),
      })
      expect(await code(capped.create({ network: { allow: ['9.0.0.1'] } }))).toMatchObject({ code: 'S110' })
    } finally {
      await closed.close()
      await capped.close()
    }
  })

  it('decides by name, by address, by port, and with the cap', () => {
    const m = new PolicyMatcher(
      parseNetworkOption({ allow: ['*.pkg.test', 'api.test:443', '192.0.2.0/24'], deny: ['bad.pkg.test'] })!,
      parseNetworkOption({ allow: ['*.test', '192.0.2.0/25'] }),
    )
    expect(m.name('x.pkg.test').allowed).toBe(true)
    expect(m.name('pkg.test').allowed).toBe(false) // *.suffix: subdomains only
    expect(m.name('bad.pkg.test').reason).toContain('deny entry')
    expect(m.name('api.test', 443).allowed).toBe(true)
    expect(m.name('api.test', 80).allowed).toBe(false)
    expect(m.address('192.0.2.5', 80, null).allowed).toBe(true)
    expect(m.address('192.0.2.200', 80, null).allowed).toBe(false) // over the cap
    expect(m.address('127.0.0.1', 80, 'x.pkg.test').allowed).toBe(false) // an allowed name cannot point at the host
    expect(m.address('169.254.169.254', 80, 'x.pkg.test').allowed).toBe(false)
  })
})
