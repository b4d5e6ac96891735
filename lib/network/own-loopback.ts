/**
 * Which proxy requests are for the sandbox's own loopback: programs that ignore no_proxy
 * (busybox wget) send `GET http://127.0.0.1:8080/` to the proxy, meaning the sandbox's loopback,
 * which the host cannot reach. When the host accepts the sandbox's proxy connections itself
 * (proxy-handoff.ts) it hands such a request back to the sandbox's relay.
 *
 * The reading is agent/egress/local.go's ownLoopback (which checks again): the authority as
 * written, without a URL parser's normalising (2130706433 stays a name, for the host's policy to
 * refuse); localhost, or a loopback or unspecified IP literal; unless the policy names that host
 * loopback address and port (allowHostLoopback).
 */
import net from 'node:net'
import { normalizeAddress } from './address.js'
import type { BootHostLoopback } from '../protocol/contract.gen.js'

export class OwnLoopback {
  readonly #named: { list: net.BlockList; port: number }[]

  constructor(named: BootHostLoopback[]) {
    this.#named = named.map(({ net: cidr, port }) => {
      const [ip, bits] = cidr.split('/')
      const list = new net.BlockList()
      list.addSubnet(ip, Number(bits), net.isIPv6(ip) ? 'ipv6' : 'ipv4')
      return { list, port }
    })
  }

  /** Whether `method target` (a CONNECT authority or an absolute-form URL) is for the sandbox's own loopback. */
  has(method: string, target: string): boolean {
    const authority = method === 'CONNECT' ? target : /^http:\/\/([^/?#]*)/i.exec(target)?.[1]
    if (!authority) return false
    const m = /^(?:\[([^\]]*)\]|([^:]*))(?::(\d*))?$/.exec(authority.slice(authority.lastIndexOf('@') + 1))
    // A CONNECT authority without a port is malformed (the host's policy refuses it).
    if (!m || (method === 'CONNECT' && m[3] === undefined)) return false
    const port = m[3] || (method === 'CONNECT' ? '' : '80')
    const name = (m[1] ?? m[2]).toLowerCase().replace(/\.$/, '')
    const ip = name === 'localhost' ? '127.0.0.1' : name
    // Go's net.ParseIP takes no zone.
    if (!net.isIP(ip) || ip.includes('%')) return false
    const a = normalizeAddress(ip)!
    const loopback =
      a.family === 'ipv4' ? a.ip.startsWith('127.') || a.ip === '0.0.0.0' : a.ip === '::1' || a.ip === '::'
    if (!loopback) return false
    return !this.#named.some((n) => n.list.check(a.ip, a.family) && String(n.port) === port)
  }
}
