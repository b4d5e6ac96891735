/**
 * `network: true` reaches a real public IPv4 destination this machine
 * reaches (the Debian archive its apt uses, read from its sources at run time), by the proxy and
 * through the sandbox's resolver, and is refused the host's loopback in every spelling; a name
 * denied by the policy stays denied however it is written (trailing dot, case, absolute-form).
 * (Issue 28, items 2 and 3.)
 */
import dns from 'node:dns'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import {
  absoluteViaProxy,
  aptArchive,
  connectRequest,
  loopbackRefusal,
  rawToProxy,
  secretService,
} from '../helpers/network-attack.js'
import { testRuntime } from '../helpers/runtime.js'

const archive = aptArchive()
let rt: Runtime
let service: Awaited<ReturnType<typeof secretService>>
beforeAll(async () => {
  rt = testRuntime()
  service = await secretService('SECRET-OF-A-HOST-SERVICE')
})
afterAll(async () => {
  await rt.close()
  service.close()
})

describe.skipIf(archive === null)('network: true', () => {
  let sb: Sandbox
  beforeAll(async () => {
    sb = await rt.create({ image: 'base', driver: 'namespace', network: true })
  })
  afterAll(async () => {
    await sb?.stop()
  })

  it("egress: the archive this machine's apt uses is reached through the proxy, and its name resolves to A records", async () => {
    const { host, path, suite } = archive!
    const release = await sb.exec('sh', ['-c', 'timeout 60 wget -q -O- "$URL"'], {
      timeoutMs: 90_000,
      env: { URL: `http://${host}${path}/dists/${suite}/Release` },
    })
    expect(release.stderr).toBe('')
    expect(release.stdout).toMatch(new RegExp(`^Codename: ${suite}$`, 'm'))
    const lookup = await sb.exec('nslookup', ['-type=a', host], { timeoutMs: 30_000 })
    expect(lookup.exitCode).toBe(0)
    // An IPv4 answer after the server's own address lines.
    expect(lookup.stdout.split(/Name:/).slice(1).join('')).toMatch(/Address:\s+\d+\.\d+\.\d+\.\d+/)
    expect(sb.usage.network!.allowed).toBeGreaterThanOrEqual(1)
  })

  it("egress: the host's loopback in every spelling, by CONNECT and absolute-form, is refused", async () => {
    const p = service.port
    const forms = [
      `127.0.0.1:${p}`,
      `127.1.2.3:${p}`,
      `0.0.0.0:${p}`,
      `0:${p}`,
      `[::1]:${p}`,
      `[::]:${p}`,
      `[::ffff:127.0.0.1]:${p}`,
      `[::ffff:0.0.0.0]:${p}`,
      `[0:0:0:0:0:ffff:7f00:1]:${p}`,
      `2130706433:${p}`,
      `127.1:${p}`,
      `0x7f.1:${p}`,
      `127.0.0.1.:${p}`,
      `localhost:${p}`,
      `LOCALHOST.:${p}`,
    ]
    for (const form of forms) {
      const byConnect = await rawToProxy(sb, connectRequest(form))
      expect(byConnect, `CONNECT ${form}`).toMatch(loopbackRefusal(form))
      expect(byConnect, `CONNECT ${form}`).not.toContain('SECRET')
      const absolute = await absoluteViaProxy(sb, `http://${form}/`)
      expect(absolute, `GET http://${form}/`).toMatch(loopbackRefusal(form))
      expect(absolute, `GET http://${form}/`).not.toContain('SECRET')
    }
  })
})

describe.skipIf(archive === null)('deny by name', () => {
  it('egress: a denied name written with a trailing dot, in upper case or in absolute-form is refused', async () => {
    const { host, path, suite } = archive!
    // The archive's own address is allowed outright: only the deny entry stands between.
    const [ip] = await new dns.promises.Resolver().resolve4(host)
    const sb = await rt.create({
      image: 'base',
      driver: 'namespace',
      network: { allow: ['*', `${ip}/32`], deny: [host] },
    })
    try {
      for (const written of [`${host}.`, `${host.toUpperCase()}.`, host.toUpperCase()]) {
        const byConnect = await rawToProxy(sb, connectRequest(`${written}:80`))
        expect(byConnect, written).toMatch(/^HTTP\/1\.1 403 /)
        expect(byConnect, written).toContain('deny entry')
        const absolute = await absoluteViaProxy(sb, `http://${written}${path}/dists/${suite}/Release`)
        expect(absolute, written).toMatch(/HTTP\/1\.1 403 /)
        expect(absolute, written).not.toContain('Codename:')
      }
      const lookup = await sb.exec('nslookup', [`${host.toUpperCase()}.`], { timeoutMs: 30_000 })
      expect(lookup.stdout + lookup.stderr).toContain('NXDOMAIN')
    } finally {
      await sb.stop()
    }
  })
})
