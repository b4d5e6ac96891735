/**
 * The proxy connects from the host, so an address of one of the host's own interfaces (eth0's,
 * a bridge's) reaches every host service bound to 0.0.0.0 or ::, past any firewall in front of
 * the host, just as its loopback does. `network: true`, and an allow list covering everything,
 * must refuse those addresses as they refuse the loopback; and `*` must not reach the ranges
 * that are not public (documentation, NAT64, 6to4…). The attacker is root in the sandbox,
 * talking to its proxy with busybox nc and wget. (Issue 40, item 5.)
 */
import net from 'node:net'
import os from 'node:os'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { normalizeAddress } from '../../lib/network/address.js'
import { OPEN_POLICY, parseNetworkOption, PolicyMatcher } from '../../lib/network/policy.js'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { absoluteViaProxy, connectRequest, rawToProxy, secretService } from '../helpers/network-attack.js'
import { testRuntime } from '../helpers/runtime.js'

/** The host's own addresses but its loopback and link-local ones, as a URL authority writes them. */
const hostAddresses = Object.values(os.networkInterfaces())
  .flatMap((list) => list ?? [])
  .filter((e) => !e.internal && !(e.family === 'IPv6' && e.address.toLowerCase().startsWith('fe80:')))
  .map((e) => normalizeAddress(e.address)!)
  .map((a) => (a.family === 'ipv6' ? `[${a.ip}]` : a.ip))

let rt: Runtime
let service: Awaited<ReturnType<typeof secretService>>
beforeAll(async () => {
  rt = testRuntime()
  // Bound to every address of the host, as most host services are.
  service = await secretService('SECRET-OF-A-SERVICE-ON-ALL-ADDRESSES', '::')
})
afterAll(async () => {
  await rt.close()
  service.close()
})

/** What CONNECT and an absolute-form GET to each host address got back. */
async function attempts(sb: Sandbox): Promise<{ form: string; got: string }[]> {
  const out: { form: string; got: string }[] = []
  for (const host of hostAddresses) {
    const authority = `${host}:${service.port}`
    out.push({ form: `CONNECT ${authority}`, got: await rawToProxy(sb, connectRequest(authority)) })
    out.push({ form: `GET http://${authority}/`, got: await absoluteViaProxy(sb, `http://${authority}/`) })
  }
  return out
}

describe.skipIf(hostAddresses.length === 0)("the host's own interface addresses", () => {
  it('the service answers on those addresses from the host itself (the attack has a target)', async () => {
    for (const host of hostAddresses) {
      const got = await new Promise<string>((resolve, reject) => {
        const s = net.connect(service.port, host.replace(/^\[|\]$/g, ''))
        let text = ''
        s.on('data', (d) => (text += d))
        s.on('end', () => resolve(text))
        s.on('error', reject)
      })
      expect(got, host).toContain('SECRET')
    }
  })

  const policies: [string, boolean | { allow: string[] }][] = [
    ['network: true', true],
    ["an allow list covering every address (['0.0.0.0/0', '::/0'])", { allow: ['0.0.0.0/0', '::/0'] }],
  ]
  for (const [label, network] of policies) {
    it(`${label}: CONNECT and GET to each of them are refused (403), nothing of the service comes back`, async () => {
      const sb = await rt.create({ image: 'base', driver: 'namespace', network })
      try {
        for (const { form, got } of await attempts(sb)) {
          expect(got, form).not.toContain('SECRET')
          expect(got, form).toMatch(/HTTP\/1\.1 403 /)
        }
      } finally {
        await sb.stop()
      }
    })
  }

  it('allowHostLoopback with an entry naming the address and port opens that one service, as for the loopback', async () => {
    const [host] = hostAddresses
    const authority = `${host}:${service.port}`
    const sb = await rt.create({
      image: 'base',
      driver: 'namespace',
      network: { allow: [authority, '127.0.0.1:1'], allowHostLoopback: true },
    })
    try {
      expect(await rawToProxy(sb, connectRequest(authority))).toContain('SECRET')
    } finally {
      await sb.stop()
    }
  })

  it('the verdict names the reason', () => {
    const m = new PolicyMatcher(parseNetworkOption({ allow: ['0.0.0.0/0', '::/0'] })!)
    const ip = hostAddresses[0].replace(/^\[|\]$/g, '')
    expect(m.address(ip, service.port, null)).toEqual({
      allowed: false,
      reason: expect.stringContaining('is an address of this host (allowHostLoopback is off)'),
    })
  })
})

describe('ranges that are not public', () => {
  it('`*` refuses documentation, benchmarking, NAT64, 6to4, Teredo and reserved addresses, and still reaches public ones', () => {
    const m = new PolicyMatcher(OPEN_POLICY)
    for (const ip of [
      '192.0.2.7',
      '198.51.100.7',
      '203.0.113.7',
      '198.18.0.1',
      '2001:db8::7',
      '3fff::7',
      '64:ff9b::a00:1', // NAT64 of 10.0.0.1
      '64:ff9b:1::1',
      '2002:a00:1::1', // 6to4 of 10.0.0.1
      '2001:0:4136:e378::1', // Teredo
      '100::1',
    ])
      expect(m.address(ip, 80, null).allowed, ip).toBe(false)
    for (const ip of ['8.8.8.8', '2606:4700::1111', '1.1.1.1']) expect(m.address(ip, 80, null).allowed, ip).toBe(true)
  })
})
