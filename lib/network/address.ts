/**
 * One spelling per destination, before any check. A sandbox chooses how it writes a host, and
 * the kernel, the WHATWG URL parser and inet_aton accept many spellings of one address
 * (`127.1`, `2130706433`, `0x7f.1`, `[::ffff:7f00:1]`, `0`) or of one name (`BAD.test.`). The
 * policy, the proxy and the resolver compare only what these functions return.
 */
import net from 'node:net'
import os from 'node:os'

export type Host = { kind: 'ip'; ip: string; family: 'ipv4' | 'ipv6' } | { kind: 'name'; name: string }

const LABEL = /^(?!-)[a-z0-9_-]{1,63}(?<!-)$/

/** A host name lower-cased, one trailing dot removed, or null when a label is empty or malformed. */
export function normalizeName(text: string): string | null {
  let name = text.toLowerCase()
  if (name.endsWith('.')) name = name.slice(0, -1)
  if (name.length === 0 || name.length > 253) return null
  return name.split('.').every((label) => LABEL.test(label)) ? name : null
}

/** The 16 bytes of an IPv6 address (no zone), or null. */
function ipv6Bytes(ip: string): Buffer | null {
  if (!net.isIPv6(ip) || ip.includes('%')) return null
  let text = ip
  // A dotted IPv4 tail (::ffff:1.2.3.4) becomes two hex groups.
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text)
  if (dotted) {
    const [a, b, c, d] = dotted[1].split('.').map(Number)
    text = text.slice(0, dotted.index) + `${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`
  }
  const [head, tail] = text.split('::')
  const groups = (s: string | undefined) => (s ? s.split(':') : [])
  const h = groups(head)
  const t = groups(tail)
  const all = tail === undefined ? h : [...h, ...Array(8 - h.length - t.length).fill('0'), ...t]
  if (all.length !== 8) return null
  const out = Buffer.alloc(16)
  all.forEach((g, i) => out.writeUInt16BE(parseInt(g, 16), i * 2))
  return out
}

export function ipv6ToBytes(ip: string): Buffer {
  const bytes = ipv6Bytes(ip)
  if (!bytes) throw new Error(`not an IPv6 address: ${ip}`)
  return bytes
}

/**
 * An address in its one spelling: IPv4 dotted, an IPv4-mapped IPv6 address (::ffff:a.b.c.d in
 * any spelling) as the IPv4 address it is, any other IPv6 address compressed and lower-cased.
 * null for anything else (a zone id included).
 */
export function normalizeAddress(ip: string): { ip: string; family: 'ipv4' | 'ipv6' } | null {
  if (net.isIPv4(ip)) return { ip, family: 'ipv4' }
  const bytes = ipv6Bytes(ip)
  if (!bytes) return null
  if (bytes.subarray(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff) {
    return { ip: `${bytes[12]}.${bytes[13]}.${bytes[14]}.${bytes[15]}`, family: 'ipv4' }
  }
  const groups: string[] = []
  for (let i = 0; i < 16; i += 2) groups.push(bytes.readUInt16BE(i).toString(16))
  // The URL parser compresses the longest run of zero groups, as RFC 5952 says.
  return { ip: new URL(`http://[${groups.join(':')}]/`).hostname.slice(1, -1), family: 'ipv6' }
}

/**
 * What a host a sandbox wrote means, or null when it is neither an address nor a valid name.
 * Anything the URL parser reads as IPv4 (`127.1`, `2130706433`, `0x7f.1`, `0`, `127.0.0.1.`) is
 * that address, as a connect to it would be.
 */
export function normalizeHost(text: string): Host | null {
  const bare = text.startsWith('[') && text.endsWith(']') ? text.slice(1, -1) : text
  if (bare.includes(':')) {
    const a = normalizeAddress(bare)
    return a ? { kind: 'ip', ...a } : null
  }
  if (bare.length === 0 || bare.length > 254 || !/^[A-Za-z0-9._-]+$/.test(bare)) return null
  let hostname: string
  try {
    hostname = new URL(`http://${bare}/`).hostname
  } catch {
    return null
  }
  if (net.isIPv4(hostname)) return { kind: 'ip', ip: hostname, family: 'ipv4' }
  const name = normalizeName(hostname)
  // A name whose last label is all digits is an address the URL parser refused (too large).
  return name && !/(^|\.)\d+$/.test(name) ? { kind: 'name', name } : null
}

/**
 * The host's own loopback: 127.0.0.0/8, 0.0.0.0/8 (a connect to 0.0.0.0 reaches the local
 * host on Linux), and ::/96 (`::`, `::1` and the IPv4-compatible forms of the above). Mapped
 * forms arrive here as IPv4, through normalizeAddress.
 */
export function isHostLoopback(a: { ip: string; family: 'ipv4' | 'ipv6' }): boolean {
  if (a.family === 'ipv4') {
    const first = Number(a.ip.split('.')[0])
    return first === 127 || first === 0
  }
  return ipv6ToBytes(a.ip)
    .subarray(0, 12)
    .every((b) => b === 0)
}

/** How long a reading of the host's interface addresses is used (a reading costs ~40 µs). */
const OWN_ADDRESSES_TTL_MS = 1000
let ownAddresses: { read: number; set: Set<string> } | null = null

/**
 * Whether `a` is an address of one of the host's own interfaces (eth0's, a bridge's…): a connect
 * to it from the host reaches the host's services bound to 0.0.0.0 or ::, past any firewall in
 * front of the host, as its loopback would. Read from the interfaces at most once a second, so
 * an address the host gains is known within a second.
 */
export function isHostOwnAddress(a: { ip: string; family: 'ipv4' | 'ipv6' }): boolean {
  const now = performance.now()
  if (ownAddresses === null || now - ownAddresses.read > OWN_ADDRESSES_TTL_MS) {
    const set = new Set<string>()
    for (const list of Object.values(os.networkInterfaces()))
      for (const entry of list ?? []) {
        const own = normalizeAddress(entry.address)
        if (own) set.add(own.ip)
      }
    ownAddresses = { read: now, set }
  }
  return ownAddresses.set.has(a.ip)
}
