/**
 * The policy must not let a sandbox reach the host's own services. A connect
 * to 0.0.0.0 (or ::, or ::ffff:0.0.0.0) reaches the local host, so an allow entry that covers it
 * (0.0.0.0/0, 0.0.0.0/8, ::/0, [::ffff:0.0.0.0]) must not open it; and allowHostLoopback opens
 * only the loopback ports the allow list names, not every service of the host.
 * The attacker is root in the sandbox, talking to the proxy directly with busybox nc.
 * (Issue 28, item 1.)
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { allowlistPolicy, parseNetworkOption, PolicyMatcher } from '../../lib/network/policy.js'
import type { Runtime } from '../../lib/runtime.js'
import {
  absoluteViaProxy,
  connectRequest,
  loopbackRefusal,
  rawToProxy,
  secretService,
  servedInSandbox,
} from '../helpers/network-attack.js'
import { testRuntime } from '../helpers/runtime.js'

let rt: Runtime
let opened: Awaited<ReturnType<typeof secretService>>
let other: Awaited<ReturnType<typeof secretService>>
beforeAll(async () => {
  rt = testRuntime()
  opened = await secretService('SECRET-OF-THE-NAMED-PORT')
  other = await secretService('SECRET-OF-ANOTHER-HOST-SERVICE')
})
afterAll(async () => {
  await rt.close()
  opened.close()
  other.close()
})

/** Every spelling of the host's loopback a sandbox could write, for a port. */
const loopbackForms = (port: number) => [
  `127.0.0.1:${port}`,
  `0.0.0.0:${port}`,
  `0:${port}`,
  `127.1:${port}`,
  `2130706433:${port}`,
  `0x7f.1:${port}`,
  `[::1]:${port}`,
  `[::]:${port}`,
  `[::ffff:127.0.0.1]:${port}`,
  `[::ffff:0.0.0.0]:${port}`,
  `[0:0:0:0:0:ffff:7f00:1]:${port}`,
  `[::127.0.0.1]:${port}`,
]

/** Tries every form by CONNECT and by absolute-form; returns what each attempt got back. */
async function attempts(
  sb: Awaited<ReturnType<Runtime['create']>>,
  port: number,
): Promise<{ form: string; authority: string; got: string }[]> {
  const out: { form: string; authority: string; got: string }[] = []
  for (const form of loopbackForms(port)) {
    out.push({ form: `CONNECT ${form}`, authority: form, got: await rawToProxy(sb, connectRequest(form)) })
    out.push({ form: `GET http://${form}/`, authority: form, got: await absoluteViaProxy(sb, `http://${form}/`) })
  }
  return out
}

describe('network policy', () => {
  it("policy: an allow entry covering 0.0.0.0 or :: (0.0.0.0/0, 0.0.0.0/8, ::/0, [::ffff:0.0.0.0]) reaching the host's loopback is refused", async () => {
    const sb = await rt.create({
      image: 'base',
      driver: 'namespace',
      network: { allow: ['0.0.0.0/0', '0.0.0.0/8', '::/0', '[::ffff:0.0.0.0]'] },
    })
    try {
      for (const { form, authority, got } of await attempts(sb, other.port)) {
        expect(got, form).not.toContain('SECRET')
        expect(got, form).toMatch(loopbackRefusal(authority))
        if (form.startsWith('CONNECT') && !servedInSandbox(authority)) expect(got, form).toContain("host's loopback")
      }
    } finally {
      await sb.stop()
    }
  })

  it('policy: allowHostLoopback reaching a loopback port the allow list does not name is refused', async () => {
    const sb = await rt.create({
      image: 'base',
      driver: 'namespace',
      network: { allow: [`127.0.0.1:${opened.port}`, '0.0.0.0/0:443'], allowHostLoopback: true },
    })
    try {
      // The named port is open (by its address; the other spellings are the same destination).
      expect(await rawToProxy(sb, connectRequest(`127.0.0.1:${opened.port}`))).toContain('SECRET-OF-THE-NAMED-PORT')
      expect(await rawToProxy(sb, connectRequest(`[::ffff:127.0.0.1]:${opened.port}`))).toContain(
        'SECRET-OF-THE-NAMED-PORT',
      )
      for (const { form, authority, got } of await attempts(sb, other.port)) {
        expect(got, form).not.toContain('SECRET')
        expect(got, form).toMatch(loopbackRefusal(authority))
      }
    } finally {
      await sb.stop()
    }
  })

  it('policy: allowHostLoopback without a loopback entry naming a port (every service of the host) is refused at create', async () => {
    for (const network of [
      { allowHostLoopback: true },
      { allow: ['127.0.0.1'], allowHostLoopback: true },
      { allow: ['0.0.0.0/0'], allowHostLoopback: true },
      { allow: ['a.test'], hosts: { 'a.test': '::ffff:127.0.0.1' } },
    ]) {
      expect(() => parseNetworkOption(network), JSON.stringify(network)).toThrow(
        expect.objectContaining({ code: 'S001' }),
      )
    }
  })

  it("policy: the runtime's networkAllowlist cap is bypassed by a pinned loopback name or another loopback port: refused", () => {
    // The runtime allows the host's loopback on one port only.
    const cap = allowlistPolicy(['127.0.0.1:5432', '*.test'])
    const m = new PolicyMatcher(
      parseNetworkOption({
        allow: ['db.test:6379', '127.0.0.1:5432'],
        hosts: { 'db.test': '127.0.0.1' },
        allowHostLoopback: true,
      })!,
      cap,
    )
    expect(m.address('127.0.0.1', 5432, null).allowed).toBe(true)
    expect(m.address('127.0.0.1', 6379, 'db.test', true).allowed).toBe(false)
    expect(m.address('0.0.0.0', 6379, null).allowed).toBe(false)
    expect(m.address('::ffff:127.0.0.1', 6379, null).allowed).toBe(false)
  })
})
