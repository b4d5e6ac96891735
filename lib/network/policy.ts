/**
 * A sandbox's network policy: what it may reach, parsed and checked once at create, then asked
 * about every destination by the resolver and the proxy (lib/network/gateway.ts).
 *
 * Entries: `*` (any public destination), a host name, `*.suffix` (its subdomains), an IP or a
 * CIDR, each optionally with `:port` (IPv6 in brackets when a port follows: `[::1]:443`).
 */
import net from 'node:net'
import { SandboxError } from '../errors.js'
import { assertObject, describe, optionsObject, optionalBoolean } from '../options.js'
import { isHostLoopback, isHostOwnAddress, normalizeAddress, normalizeName } from './address.js'
import { errors } from '../protocol/errors.gen.js'

export interface NetworkPolicy {
  allow: string[]
  deny: string[]
  /**
   * The host's loopback (127.0.0.0/8, 0.0.0.0/8, ::, ::1, in any spelling) and the addresses of
   * the host's own interfaces are never reachable without it; with it, only the ports the allow
   * list names (`127.0.0.1:5432`, or a name pinned to a loopback address with its port).
   */
  allowHostLoopback: boolean
  /** Names the resolver answers with the caller's address (as /etc/hosts would); each must also be allowed. */
  hosts: Record<string, string>
}

/** What `network: true` means: any public destination, never the host's loopback or private ranges. */
export const OPEN_POLICY: NetworkPolicy = Object.freeze({
  allow: ['*'],
  deny: [],
  allowHostLoopback: false,
  hosts: {},
}) as NetworkPolicy

type Target =
  | { kind: 'any' }
  | { kind: 'name'; name: string }
  | { kind: 'suffix'; suffix: string }
  | { kind: 'net'; list: net.BlockList; family: Family; ip: string; bits: number }
type Family = 'ipv4' | 'ipv6'

interface Entry {
  text: string
  target: Target
  /** null: every port. */
  port: number | null
}

const MAX_ENTRIES = 1024

/** An IP or CIDR (normalised: a mapped IPv6 one is the IPv4 one it is), or null when `text` is neither. */
function parseNet(text: string): Extract<Target, { kind: 'net' }> | null {
  const slash = text.indexOf('/')
  const a = normalizeAddress(slash < 0 ? text : text.slice(0, slash))
  if (!a) return null
  const max = a.family === 'ipv4' ? 32 : 128
  let bits = max
  if (slash >= 0) {
    const prefix = text.slice(slash + 1)
    if (!/^\d{1,3}$/.test(prefix) || Number(prefix) > 128) return null
    bits = Number(prefix)
    // ::ffff:a.b.c.d/96+n is the IPv4 a.b.c.d/n; a shorter prefix is an IPv6 range.
    const mapped = a.family === 'ipv4' && text.slice(0, slash).includes(':')
    if (mapped) {
      if (bits < 96) return null
      bits -= 96
    }
    if (bits > max) return null
  }
  const list = new net.BlockList()
  list.addSubnet(a.ip, bits, a.family)
  return { kind: 'net', list, family: a.family, ip: a.ip, bits }
}

/** Whether a normalised address lies in a net target (of its own family only). */
function covers(target: Target, a: { ip: string; family: Family }): boolean {
  return target.kind === 'net' && target.family === a.family && target.list.check(a.ip, a.family)
}

/** Splits `host:port`, `[v6]:port`, a bare v6 address or CIDR, or a host without port. */
function splitPort(text: string): [string, string | null] {
  if (text.startsWith('[')) {
    const close = text.indexOf(']')
    if (close < 0) return [text, null]
    const rest = text.slice(close + 1)
    return [text.slice(1, close), rest.startsWith(':') ? rest.slice(1) : rest === '' ? null : rest]
  }
  const colons = text.split(':').length - 1
  if (colons !== 1) return [text, null]
  const i = text.indexOf(':')
  return [text.slice(0, i), text.slice(i + 1)]
}

/** One entry, or an S001 naming it. */
export function parseEntry(raw: unknown, name: string): Entry {
  if (typeof raw !== 'string' || raw.length === 0 || raw.length > 300) fail(name, raw)
  const [host, portText] = splitPort(raw.trim().toLowerCase())
  let port: number | null = null
  if (portText !== null) {
    if (!/^\d{1,5}$/.test(portText) || Number(portText) < 1 || Number(portText) > 65535) fail(name, raw)
    port = Number(portText)
  }
  if (host === '*') return { text: raw, target: { kind: 'any' }, port }
  const suffix = host.startsWith('*.') ? normalizeName(host.slice(2)) : null
  if (suffix) return { text: raw, target: { kind: 'suffix', suffix: `.${suffix}` }, port }
  const target = parseNet(host)
  if (target) return { text: raw, target, port }
  const hostName = normalizeName(host)
  if (hostName && !/^[\d.]+$/.test(hostName)) return { text: raw, target: { kind: 'name', name: hostName }, port }
  fail(name, raw)
}

function fail(name: string, raw: unknown): never {
  throw errors.badArgument({
    subject: `${name} ${describe(raw)}`,
    problem: 'is not a host name, *.suffix, IP or CIDR with an optional :port',
  })
}

function entries(value: unknown, name: string): string[] {
  if (value === undefined) return []
  if (!Array.isArray(value))
    throw errors.badArgument({ subject: `${name}`, problem: `must be an array of strings, got ${describe(value)}` })
  if (value.length > MAX_ENTRIES)
    throw errors.outOfRange({
      field: `${name}'s length`,
      allowed: `at most ${MAX_ENTRIES} entries`,
      value: value.length,
    })
  value.forEach((v, i) => parseEntry(v, `${name}[${i}]`))
  return [...value] as string[]
}

/** `create({ network })`: false (default), true, or a policy object. null means no network but loopback. */
export function parseNetworkOption(value: unknown, name = 'network'): NetworkPolicy | null {
  if (value === undefined || value === false) return null
  if (value === true) return { ...OPEN_POLICY, allow: [...OPEN_POLICY.allow], hosts: {} }
  const o = optionsObject(value, name, ['allow', 'deny', 'allowHostLoopback', 'hosts'])
  const hosts: Record<string, string> = {}
  if (o.hosts !== undefined) {
    assertObject(o.hosts, `${name}.hosts`)
    for (const [host, ip] of Object.entries(o.hosts)) {
      const key = normalizeName(host)
      if (!key)
        throw errors.badArgument({ subject: `${name}.hosts key ${describe(host)}`, problem: 'is not a host name' })
      const address = typeof ip === 'string' ? normalizeAddress(ip) : null
      if (!address)
        throw errors.badArgument({
          subject: `${name}.hosts.${host}`,
          problem: `must be an IP address, got ${describe(ip)}`,
        })
      hosts[key] = address.ip
    }
  }
  const policy: NetworkPolicy = {
    allow: entries(o.allow, `${name}.allow`),
    deny: entries(o.deny, `${name}.deny`),
    allowHostLoopback: optionalBoolean(o.allowHostLoopback, `${name}.allowHostLoopback`, false),
    hosts,
  }
  const allow = compile(policy.allow, 'allow')
  for (const host of Object.keys(hosts)) {
    if (!nameListed(allow, host))
      throw errors.badArgument({
        subject: `${name}.hosts`,
        problem: `names ${describe(host)}, which ${name}.allow does not allow`,
      })
  }
  const loopbackPinned = Object.keys(hosts).find((host) => loopbackPin(policy, host))
  if (loopbackPinned && !policy.allowHostLoopback)
    throw errors.badArgument({
      subject: `${name}.hosts.${loopbackPinned}`,
      problem: `pins ${hosts[loopbackPinned]}, the host's loopback, which needs allowHostLoopback: true and an allow entry naming its port`,
    })
  if (policy.allowHostLoopback) checkLoopbackEntries(policy, allow, name)
  return policy
}

/**
 * allowHostLoopback opens only the loopback destinations the allow list names with a port: an
 * address entry covering a loopback address, or a name pinned to one. An entry of the host's
 * loopback without a port would open every service of the host: S001.
 */
function checkLoopbackEntries(policy: NetworkPolicy, allow: Entry[], name: string): void {
  const pinnedToLoopback = (e: Entry) => e.target.kind === 'name' && loopbackPin(policy, e.target.name)
  const loopbackEntries = allow.filter(
    (e) => (e.target.kind === 'net' && reachesLoopback(e.target)) || pinnedToLoopback(e),
  )
  const portless = loopbackEntries.find((e) => e.port === null)
  if (portless)
    throw errors.badArgument({
      subject: `${name}.allow entry ${JSON.stringify(portless.text)}`,
      problem:
        "reaches the host's loopback with allowHostLoopback, so it needs a :port (it would open every service of the host)",
    })
  if (loopbackEntries.length === 0)
    throw errors.badArgument({
      subject: `${name}.allowHostLoopback`,
      problem: `opens only the loopback destinations ${name}.allow names with a port (for example "127.0.0.1:8080"), and it names none`,
    })
}

/**
 * The host's loopback destinations the policy opens by address (allowHostLoopback), as the
 * sandbox's relay takes them: a proxy request for any other loopback address is the sandbox's
 * own loopback (agent/egress/local.go).
 */
export function hostLoopbackEntries(policy: NetworkPolicy): { net: string; port: number }[] {
  if (!policy.allowHostLoopback) return []
  return compile(policy.allow, 'allow').flatMap((e) =>
    e.target.kind === 'net' && e.port !== null && reachesLoopback(e.target)
      ? [{ net: `${e.target.ip}/${e.target.bits}`, port: e.port }]
      : [],
  )
}

function loopbackPin(policy: NetworkPolicy, host: string): boolean {
  const ip = policy.hosts[host]
  return ip !== undefined && isHostLoopback(normalizeAddress(ip)!)
}

/** Whether a net target holds any address of the host's loopback (0.0.0.0/0 does). */
function reachesLoopback(t: Extract<Target, { kind: 'net' }>): boolean {
  if (isHostLoopback(t)) return true
  return t.family === 'ipv4'
    ? t.list.check('127.0.0.1', 'ipv4') || t.list.check('0.0.0.0', 'ipv4')
    : t.list.check('::1', 'ipv6')
}

function compile(list: string[], name: string): Entry[] {
  return list.map((e, i) => parseEntry(e, `${name}[${i}]`))
}

function nameMatches(target: Target, host: string): boolean {
  if (target.kind === 'name') return target.name === host
  if (target.kind === 'suffix') return host.endsWith(target.suffix)
  return false
}

/** An entry's port matches any port it has none; an undefined port (a lookup) matches every entry. */
function portMatches(e: Entry, port: number | undefined): boolean {
  return port === undefined || e.port === null || e.port === port
}

/** A deny entry with a port refuses connections to that port, not the lookups of the name. */
function denyPortMatches(e: Entry, port: number | undefined): boolean {
  return e.port === null || e.port === port
}

function nameListed(list: Entry[], host: string, port?: number): boolean {
  return list.some((e) => nameMatches(e.target, host) && portMatches(e, port))
}

/**
 * Addresses no policy reaches by name or by `*`: link-local (cloud metadata) and multicast. The
 * host's loopback is checked before this (isHostLoopback). IPv4 and IPv6 ranges are kept apart:
 * Node's BlockList matches every IPv4 address against an IPv4-mapped IPv6 rule.
 */
const NEVER_BY_NAME = { ipv4: new net.BlockList(), ipv6: new net.BlockList() }
NEVER_BY_NAME.ipv4.addSubnet('169.254.0.0', 16, 'ipv4')
NEVER_BY_NAME.ipv4.addSubnet('224.0.0.0', 4, 'ipv4')
NEVER_BY_NAME.ipv6.addSubnet('fe80::', 10, 'ipv6')
NEVER_BY_NAME.ipv6.addSubnet('ff00::', 8, 'ipv6')

/**
 * Not public (`*` does not reach them): the ranges IANA's special-purpose registries (RFC 6890)
 * do not mark globally reachable: private, shared, benchmarking, documentation, reserved,
 * unique-local; and the IPv6 ranges that carry an IPv4 address to a translator or relay
 * (NAT64, 6to4, Teredo), through which a private IPv4 address could be reached.
 */
const PRIVATE = { ipv4: new net.BlockList(), ipv6: new net.BlockList() }
for (const [ip, bits] of [
  ['10.0.0.0', 8],
  ['172.16.0.0', 12],
  ['192.168.0.0', 16],
  ['100.64.0.0', 10],
  ['198.18.0.0', 15],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['240.0.0.0', 4],
] as const)
  PRIVATE.ipv4.addSubnet(ip, bits, 'ipv4')
for (const [ip, bits] of [
  ['fc00::', 7],
  ['64:ff9b::', 96],
  ['64:ff9b:1::', 48],
  ['100::', 64],
  ['2001::', 23],
  ['2001:db8::', 32],
  ['2002::', 16],
  ['3fff::', 20],
  ['5f00::', 16],
] as const)
  PRIVATE.ipv6.addSubnet(ip, bits, 'ipv6')

/** An address with its port as a log shows it ([v6]:port). */
function destination(a: { ip: string; family: Family }, port: number | undefined): string {
  if (port === undefined) return a.ip
  return a.family === 'ipv6' ? `[${a.ip}]:${port}` : `${a.ip}:${port}`
}

export interface Verdict {
  allowed: boolean
  /** Why not, in words a log can show. */
  reason: string
}

const ALLOWED: Verdict = { allowed: true, reason: '' }

/**
 * A policy compiled for lookups. `cap` is the runtime's networkAllowlist (as a policy), which
 * every destination must also pass. Hosts and addresses are normalised here too (address.ts),
 * so no spelling of a destination compares differently from another.
 */
export class PolicyMatcher {
  readonly #allow: Entry[]
  readonly #deny: Entry[]
  readonly #policy: NetworkPolicy
  readonly #cap: PolicyMatcher | null
  /** The cap's loopback entries need no port: they bound, they do not open. */
  readonly #isCap: boolean

  constructor(policy: NetworkPolicy, cap: NetworkPolicy | null = null, isCap = false) {
    this.#policy = policy
    this.#allow = compile(policy.allow, 'allow')
    this.#deny = compile(policy.deny, 'deny')
    this.#cap = cap ? new PolicyMatcher(cap, null, true) : null
    this.#isCap = isCap
  }

  /** The address the caller pinned for a name, if any. */
  pinned(host: string): string | undefined {
    const name = normalizeName(host)
    return name === null ? undefined : this.#policy.hosts[name]
  }

  /** Whether a name may be resolved and connected to (its addresses are checked by `address`). */
  name(host: string, port?: number): Verdict {
    const name = normalizeName(host)
    if (name === null) return { allowed: false, reason: `${JSON.stringify(host)} is not a valid host name` }
    const denied = this.#deny.find(
      (e) => (nameMatches(e.target, name) || e.target.kind === 'any') && denyPortMatches(e, port),
    )
    if (denied) return { allowed: false, reason: `${name} matches deny entry ${JSON.stringify(denied.text)}` }
    const listed =
      nameListed(this.#allow, name, port) || this.#allow.some((e) => e.target.kind === 'any' && portMatches(e, port))
    if (!listed)
      return { allowed: false, reason: `${name}${port === undefined ? '' : `:${port}`} is not in the allow list` }
    return this.#cap ? this.#cap.name(name, port) : ALLOWED
  }

  /**
   * Whether an address may be connected to. `viaName` is the allowed name it was resolved from
   * (null for an address the sandbox gave itself); a pinned address is the caller's own choice,
   * except that the host's loopback is opened only as allowHostLoopback says.
   */
  address(ip: string, port: number | undefined, viaName: string | null, pinned = false): Verdict {
    const a = normalizeAddress(ip)
    if (!a) return { allowed: false, reason: `${JSON.stringify(ip)} is not an address this proxy connects to` }
    const via = viaName === null ? null : normalizeName(viaName)
    const denied = this.#deny.find((e) => covers(e.target, a) && denyPortMatches(e, port))
    if (denied) return { allowed: false, reason: `${a.ip} matches deny entry ${JSON.stringify(denied.text)}` }
    // Before any allow entry: 0.0.0.0/0 or * must not reach the host's own services, by its
    // loopback or by an address of one of its interfaces (the proxy connects from the host).
    const hostOwn = isHostLoopback(a) ? "the host's loopback" : isHostOwnAddress(a) ? 'an address of this host' : null
    const verdict =
      hostOwn !== null
        ? this.#loopbackVerdict(a, port, via, pinned, hostOwn)
        : pinned
          ? ALLOWED
          : this.#otherAddressVerdict(a, port, via)
    if (!verdict.allowed || !this.#cap) return verdict
    return this.#cap.address(a.ip, port, via, pinned)
  }

  #loopbackVerdict(
    a: { ip: string; family: Family },
    port: number | undefined,
    via: string | null,
    pinned: boolean,
    what: string,
  ): Verdict {
    const where = destination(a, port)
    if (!this.#policy.allowHostLoopback)
      return { allowed: false, reason: `${where} is ${what} (allowHostLoopback is off)` }
    const portNamed = (e: Entry) =>
      this.#isCap ? portMatches(e, port) : e.port !== null && (port === undefined || e.port === port)
    const named = this.#allow.some(
      (e) =>
        portNamed(e) &&
        (covers(e.target, a) ||
          (!this.#isCap && pinned && via !== null && e.target.kind === 'name' && e.target.name === via)),
    )
    return named
      ? ALLOWED
      : { allowed: false, reason: `${where} is ${what}, and no allow entry names it with its port` }
  }

  #otherAddressVerdict(a: { ip: string; family: Family }, port: number | undefined, via: string | null): Verdict {
    if (this.#allow.some((e) => covers(e.target, a) && portMatches(e, port))) return ALLOWED
    if (NEVER_BY_NAME[a.family].check(a.ip, a.family))
      return { allowed: false, reason: `${a.ip} is a link-local or multicast address` }
    // An allowed name reaches what it resolves to; `*` alone reaches public addresses only.
    const byListedName = via !== null && nameListed(this.#allow, via, port)
    if (byListedName) return ALLOWED
    const any = this.#allow.some((e) => e.target.kind === 'any' && portMatches(e, port))
    if (any && !PRIVATE[a.family].check(a.ip, a.family)) return ALLOWED
    return {
      allowed: false,
      reason: `${destination(a, port)} is not in the allow list${any ? ' (* reaches public addresses only)' : ''}`,
    }
  }
}

/** Whether `entry` (of a sandbox's allow list) lies within one of the cap's entries. */
function covered(entry: Entry, cap: Entry[]): boolean {
  return cap.some((c) => {
    if (c.port !== null && c.port !== entry.port) return false
    const t = entry.target
    switch (c.target.kind) {
      case 'any':
        return t.kind !== 'net' || !reachesLoopback(t)
      case 'name':
        return t.kind === 'name' && t.name === c.target.name
      case 'suffix':
        return (
          (t.kind === 'name' || t.kind === 'suffix') &&
          (t.kind === 'name' ? t.name : t.suffix.slice(1)).endsWith(c.target.suffix)
        )
      case 'net':
        return t.kind === 'net' && t.family === c.target.family && t.bits >= c.target.bits && covers(c.target, t)
    }
  })
}

/**
 * The runtime's cap: a sandbox may only ask for entries within `networkAllowlist`, and the
 * host's loopback only when the list holds an entry covering 127.0.0.1. S110 names what is over.
 */
export function checkAgainstAllowlist(policy: NetworkPolicy, allowlist: string[]): void {
  const cap = compile(allowlist, 'networkAllowlist')
  if (cap.length === 0)
    throw errors.networkNotAllowed({
      subject: "the runtime's networkAllowlist",
      problem: 'is empty, which denies every network; create the sandbox with network: false',
    })
  compile(policy.allow, 'network.allow').forEach((entry) => {
    if (!covered(entry, cap))
      throw errors.networkNotAllowed({
        subject: `network.allow entry ${JSON.stringify(entry.text)}`,
        problem: "is not within the runtime's networkAllowlist",
      })
  })
  if (policy.allowHostLoopback && !cap.some((c) => c.target.kind === 'net' && reachesLoopback(c.target))) {
    throw errors.networkNotAllowed({
      subject: 'network.allowHostLoopback',
      problem: "is not within the runtime's networkAllowlist (it needs an entry covering 127.0.0.1)",
    })
  }
}

/** The runtime's allowlist as a policy every destination must also pass. */
export function allowlistPolicy(allowlist: string[]): NetworkPolicy {
  const cap = compile(allowlist, 'networkAllowlist')
  const loopback = cap.some((c) => c.target.kind === 'net' && reachesLoopback(c.target))
  return { allow: [...allowlist], deny: [], allowHostLoopback: loopback, hosts: {} }
}

/** networkAllowlist of the runtime config: entries as for network.allow; S103 names a bad one. */
export function parseNetworkAllowlist(value: unknown): string[] | null {
  if (value === undefined) return null
  try {
    return entries(value, 'networkAllowlist')
  } catch (err) {
    throw new SandboxError('S103', (err as Error).message)
  }
}
