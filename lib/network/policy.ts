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
import { MESSAGES } from '../protocol/contract.gen.js'

export interface NetworkPolicy {
  allow: string[]
  deny: string[]
  /** The host's loopback (127.0.0.0/8, ::1) is never reachable without it. */
  allowHostLoopback: boolean
  /** Names the resolver answers with the caller's address (as /etc/hosts would); each must also be allowed. */
  hosts: Record<string, string>
}

/** What `network: true` means: any public destination, never the host's loopback or private ranges. */
export const OPEN_POLICY: NetworkPolicy = Object.freeze({ allow: ['*'], deny: [], allowHostLoopback: false, hosts: {} }) as NetworkPolicy

type Target = { kind: 'any' } | { kind: 'name'; name: string } | { kind: 'suffix'; suffix: string } | { kind: 'net'; list: net.BlockList; text: string }

interface Entry {
  text: string
  target: Target
  /** null: every port. */
  port: number | null
}

const LABEL = /^(?!-)[a-z0-9_-]{1,63}(?<!-)$/
const MAX_ENTRIES = 1024

function isHostName(value: string): boolean {
  return value.length <= 253 && value.split('.').every((label) => LABEL.test(label))
}

function family(ip: string): 'ipv4' | 'ipv6' {
  return net.isIPv4(ip) ? 'ipv4' : 'ipv6'
}

/** An IP or CIDR as a block list, or null when `text` is neither. */
function parseNet(text: string): net.BlockList | null {
  const slash = text.indexOf('/')
  const ip = slash < 0 ? text : text.slice(0, slash)
  if (net.isIP(ip) === 0) return null
  const list = new net.BlockList()
  if (slash < 0) {
    list.addAddress(ip, family(ip))
    return list
  }
  const prefix = text.slice(slash + 1)
  const max = net.isIPv4(ip) ? 32 : 128
  if (!/^\d{1,3}$/.test(prefix) || Number(prefix) > max) return null
  list.addSubnet(ip, Number(prefix), family(ip))
  return list
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
  if (host.startsWith('*.') && isHostName(host.slice(2))) return { text: raw, target: { kind: 'suffix', suffix: host.slice(1) }, port }
  const list = parseNet(host)
  if (list) return { text: raw, target: { kind: 'net', list, text: host }, port }
  if (isHostName(host) && !/^[\d.]+$/.test(host)) return { text: raw, target: { kind: 'name', name: host }, port }
  fail(name, raw)
}

function fail(name: string, raw: unknown): never {
  throw new SandboxError('S001', MESSAGES.badArgument({ subject: `${name} ${describe(raw)}`, problem: 'is not a host name, *.suffix, IP or CIDR with an optional :port' }))
}

function entries(value: unknown, name: string): string[] {
  if (value === undefined) return []
  if (!Array.isArray(value)) throw new SandboxError('S001', MESSAGES.badArgument({ subject: `${name}`, problem: `must be an array of strings, got ${describe(value)}` }))
  if (value.length > MAX_ENTRIES) throw new SandboxError('S003', MESSAGES.outOfRange({ field: `${name}'s length`, allowed: `at most ${MAX_ENTRIES} entries`, value: value.length }))
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
      if (!isHostName(host.toLowerCase())) throw new SandboxError('S001', MESSAGES.badArgument({ subject: `${name}.hosts key ${describe(host)}`, problem: 'is not a host name' }))
      if (typeof ip !== 'string' || net.isIP(ip) === 0) throw new SandboxError('S001', MESSAGES.badArgument({ subject: `${name}.hosts.${host}`, problem: `must be an IP address, got ${describe(ip)}` }))
      hosts[host.toLowerCase()] = ip
    }
  }
  const policy: NetworkPolicy = {
    allow: entries(o.allow, `${name}.allow`),
    deny: entries(o.deny, `${name}.deny`),
    allowHostLoopback: optionalBoolean(o.allowHostLoopback, `${name}.allowHostLoopback`, false),
    hosts,
  }
  for (const host of Object.keys(hosts)) {
    if (!nameListed(compile(policy.allow, 'allow'), host)) throw new SandboxError('S001', MESSAGES.badArgument({ subject: `${name}.hosts`, problem: `names ${describe(host)}, which ${name}.allow does not allow` }))
  }
  return policy
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

/** Addresses no policy reaches by name or by `*`: this host, link-local (cloud metadata), unspecified, multicast. */
const NEVER_BY_NAME = new net.BlockList()
NEVER_BY_NAME.addSubnet('127.0.0.0', 8, 'ipv4')
NEVER_BY_NAME.addSubnet('0.0.0.0', 8, 'ipv4')
NEVER_BY_NAME.addSubnet('169.254.0.0', 16, 'ipv4')
NEVER_BY_NAME.addSubnet('224.0.0.0', 4, 'ipv4')
NEVER_BY_NAME.addAddress('::1', 'ipv6')
NEVER_BY_NAME.addAddress('::', 'ipv6')
NEVER_BY_NAME.addSubnet('fe80::', 10, 'ipv6')
NEVER_BY_NAME.addSubnet('ff00::', 8, 'ipv6')
NEVER_BY_NAME.addSubnet('::ffff:0:0', 96, 'ipv6')

/** Not public: private, shared, benchmark and unique-local ranges (`*` does not reach them). */
const PRIVATE = new net.BlockList()
for (const [ip, bits] of [['10.0.0.0', 8], ['172.16.0.0', 12], ['192.168.0.0', 16], ['100.64.0.0', 10], ['198.18.0.0', 15], ['192.0.0.0', 24], ['240.0.0.0', 4]] as const) PRIVATE.addSubnet(ip, bits, 'ipv4')
PRIVATE.addSubnet('fc00::', 7, 'ipv6')

const LOOPBACK = new net.BlockList()
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4')
LOOPBACK.addAddress('::1', 'ipv6')

export interface Verdict {
  allowed: boolean
  /** Why not, in words a log can show. */
  reason: string
}

const ALLOWED: Verdict = { allowed: true, reason: '' }

/**
 * A policy compiled for lookups. `cap` is the runtime's networkAllowlist (as a policy), which
 * every destination must also pass.
 */
export class PolicyMatcher {
  readonly #allow: Entry[]
  readonly #deny: Entry[]
  readonly #policy: NetworkPolicy
  readonly #cap: PolicyMatcher | null

  constructor(policy: NetworkPolicy, cap: NetworkPolicy | null = null) {
    this.#policy = policy
    this.#allow = compile(policy.allow, 'allow')
    this.#deny = compile(policy.deny, 'deny')
    this.#cap = cap ? new PolicyMatcher(cap) : null
  }

  /** The address the caller pinned for a name, if any. */
  pinned(host: string): string | undefined {
    return this.#policy.hosts[host.toLowerCase()]
  }

  /** Whether a name may be resolved and connected to (its addresses are checked by `address`). */
  name(host: string, port?: number): Verdict {
    host = host.toLowerCase()
    const denied = this.#deny.find((e) => (nameMatches(e.target, host) || e.target.kind === 'any') && denyPortMatches(e, port))
    if (denied) return { allowed: false, reason: `${host} matches deny entry ${JSON.stringify(denied.text)}` }
    const listed = nameListed(this.#allow, host, port) || this.#allow.some((e) => e.target.kind === 'any' && portMatches(e, port))
    if (!listed) return { allowed: false, reason: `${host}${port === undefined ? '' : `:${port}`} is not in the allow list` }
    return this.#cap ? this.#cap.name(host, port) : ALLOWED
  }

  /**
   * Whether an address may be connected to. `viaName` is the allowed name it was resolved from
   * (null for an address the sandbox gave itself); a pinned address is the caller's own choice.
   */
  address(ip: string, port: number | undefined, viaName: string | null, pinned = false): Verdict {
    const fam = family(ip)
    const inList = (list: Entry[]) => list.find((e) => e.target.kind === 'net' && e.target.list.check(ip, fam) && portMatches(e, port))
    const denied = this.#deny.find((e) => e.target.kind === 'net' && e.target.list.check(ip, fam) && denyPortMatches(e, port))
    if (denied) return { allowed: false, reason: `${ip} matches deny entry ${JSON.stringify(denied.text)}` }
    const verdict = pinned ? ALLOWED : this.#ownAddressVerdict(ip, fam, port, viaName, inList(this.#allow) !== undefined)
    if (!verdict.allowed || !this.#cap) return verdict
    return this.#cap.address(ip, port, viaName, pinned)
  }

  #ownAddressVerdict(ip: string, fam: 'ipv4' | 'ipv6', port: number | undefined, viaName: string | null, listed: boolean): Verdict {
    if (LOOPBACK.check(ip, fam)) {
      return this.#policy.allowHostLoopback ? ALLOWED : { allowed: false, reason: `${ip} is the host's loopback (allowHostLoopback is off)` }
    }
    if (listed) return ALLOWED
    if (NEVER_BY_NAME.check(ip, fam)) return { allowed: false, reason: `${ip} is a link-local, unspecified or multicast address` }
    // An allowed name reaches what it resolves to; `*` alone reaches public addresses only.
    const byListedName = viaName !== null && nameListed(this.#allow, viaName, port)
    if (byListedName) return ALLOWED
    const any = this.#allow.some((e) => e.target.kind === 'any' && portMatches(e, port))
    if (any && !PRIVATE.check(ip, fam)) return ALLOWED
    return { allowed: false, reason: `${ip}${port === undefined ? '' : `:${port}`} is not in the allow list${any ? ' (* reaches public addresses only)' : ''}` }
  }
}

/** Whether `entry` (of a sandbox's allow list) lies within one of the cap's entries. */
function covered(entry: Entry, cap: Entry[]): boolean {
  return cap.some((c) => {
    if (c.port !== null && c.port !== entry.port) return false
    const t = entry.target
    switch (c.target.kind) {
      case 'any':
        return t.kind !== 'net' || !LOOPBACK.check(firstAddress(t.text), family(firstAddress(t.text)))
      case 'name':
        return t.kind === 'name' && t.name === c.target.name
      case 'suffix':
        return (t.kind === 'name' || t.kind === 'suffix') && (t.kind === 'name' ? t.name : t.suffix.slice(1)).endsWith(c.target.suffix)
      case 'net': {
        if (t.kind !== 'net') return false
        const [ip, bits] = t.text.split('/')
        const capBits = Number(c.target.text.split('/')[1] ?? (net.isIPv4(ip) ? 32 : 128))
        const ownBits = Number(bits ?? (net.isIPv4(ip) ? 32 : 128))
        return ownBits >= capBits && c.target.list.check(ip, family(ip))
      }
    }
  })
}

function firstAddress(text: string): string {
  return text.split('/')[0]
}

/**
 * The runtime's cap: a sandbox may only ask for entries within `networkAllowlist`, and the
 * host's loopback only when the list holds an entry covering 127.0.0.1. S110 names what is over.
 */
export function checkAgainstAllowlist(policy: NetworkPolicy, allowlist: string[]): void {
  const cap = compile(allowlist, 'networkAllowlist')
  if (cap.length === 0) throw new SandboxError('S110', MESSAGES.networkNotAllowed({ subject: "the runtime's networkAllowlist", problem: 'is empty, which denies every network; create the sandbox with network: false' }))
  compile(policy.allow, 'network.allow').forEach((entry) => {
    if (!covered(entry, cap)) throw new SandboxError('S110', MESSAGES.networkNotAllowed({ subject: `network.allow entry ${JSON.stringify(entry.text)}`, problem: "is not within the runtime's networkAllowlist" }))
  })
  if (policy.allowHostLoopback && !cap.some((c) => c.target.kind === 'net' && c.target.list.check('127.0.0.1', 'ipv4'))) {
    throw new SandboxError('S110', MESSAGES.networkNotAllowed({ subject: 'network.allowHostLoopback', problem: "is not within the runtime's networkAllowlist (it needs an entry covering 127.0.0.1)" }))
  }
}

/** The runtime's allowlist as a policy every destination must also pass. */
export function allowlistPolicy(allowlist: string[]): NetworkPolicy {
  const cap = compile(allowlist, 'networkAllowlist')
  const loopback = cap.some((c) => c.target.kind === 'net' && c.target.list.check('127.0.0.1', 'ipv4'))
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
