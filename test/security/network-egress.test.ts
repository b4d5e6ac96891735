/**
 * A sandbox reaches a real destination this machine reaches (the Debian archive its apt uses,
 * read from its sources at run time), by the proxy and through the sandbox's resolver: by name
 * always, by `network: true` where the archive's address is public (here it is served from a
 * documentation range, which `*` refuses); it is refused the host's loopback in every spelling; a name
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

  it("egress: the archive this machine's apt uses is reached through the proxy where its address is public, and its name resolves to A records", async () => {
    const { host, suite } = archive!
    const release = await fetchRelease(sb)
    const answers = await addressAnswers(sb, host)
    if (await servedFromDocumentationRange(host)) {
      // As on the machines this project is tested on: `*` reaches public addresses only.
      expect(release.stderr).toContain('403')
      expect(release.stdout).not.toContain('Codename:')
      expect(answers).toEqual([])
    } else {
      expect(release.stderr).toBe('')
      expect(release.stdout).toMatch(new RegExp(`^Codename: ${suite}$`, 'm'))
      expect(answers.length).toBeGreaterThan(0)
      expect(sb.usage.network!.allowed).toBeGreaterThanOrEqual(1)
    }
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

describe.skipIf(archive === null)('a policy naming the archive', () => {
  it('egress: the archive is reached through the proxy by its name, whatever its address', async () => {
    const sb = await rt.create({ image: 'base', driver: 'namespace', network: { allow: [archive!.host] } })
    try {
      const release = await fetchRelease(sb)
      expect(release.stderr).toBe('')
      expect(release.stdout).toMatch(new RegExp(`^Codename: ${archive!.suite}$`, 'm'))
      expect((await addressAnswers(sb, archive!.host)).length).toBeGreaterThan(0)
      expect(sb.usage.network!.allowed).toBeGreaterThanOrEqual(1)
    } finally {
      await sb.stop()
    }
  })
})

/** The archive's Release file, fetched with busybox wget through the sandbox's proxy. */
function fetchRelease(sb: Sandbox) {
  const { host, path, suite } = archive!
  return sb.exec('sh', ['-c', 'timeout 60 wget -q -O- "$URL"'], {
    timeoutMs: 90_000,
    env: { URL: `http://${host}${path}/dists/${suite}/Release` },
  })
}

/** The IPv4 addresses the sandbox's resolver answers for `host` (busybox nslookup). */
async function addressAnswers(sb: Sandbox, host: string): Promise<string[]> {
  const lookup = await sb.exec('nslookup', ['-type=a', host], { timeoutMs: 30_000 })
  // The answers follow the server's own address lines.
  const answers = lookup.stdout.split(/Name:/).slice(1).join('')
  return [...answers.matchAll(/Address:\s+(\d+\.\d+\.\d+\.\d+)/g)].map((m) => m[1])
}

/** Whether every address of `host` lies in a documentation range (RFC 5737), which is not public. */
async function servedFromDocumentationRange(host: string): Promise<boolean> {
  const addresses = await new dns.promises.Resolver().resolve4(host)
  return addresses.every((ip) => /^(192\.0\.2|198\.51\.100|203\.0\.113)\./.test(ip))
}

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
