/**
 * The sandbox's resolver, in the host process: it answers A and AAAA queries for the names
 * the policy allows (with the caller's pinned address or a bounded DNS lookup, lookups.ts) and
 * NXDOMAIN for every other name; REFUSED when the sandbox has too many lookups in flight,
 * SERVFAIL when the upstream failed. Only the first question of a query is read; anything that
 * is not a standard query is answered FORMERR/NOTIMP, never crashes the host. It listens on the
 * host's 127.0.0.1, where any local user can send to it: it answers only datagrams from sockets
 * of its own user (pasta's), and drops the rest.
 */
import dgram from 'node:dgram'
import net from 'node:net'
import { ipv6ToBytes, normalizeName } from './address.js'
import { LookupFailure } from './lookups.js'

const TYPE_A = 1
const TYPE_AAAA = 28
const CLASS_IN = 1
const RCODE_FORMERR = 1
const RCODE_SERVFAIL = 2
const RCODE_NXDOMAIN = 3
const RCODE_NOTIMP = 4
const RCODE_REFUSED = 5
const ANSWER_TTL_S = 30

export interface Question {
  name: string
  type: number
  /** The question's bytes (name, type, class), copied into the answer. */
  raw: Buffer
}

/** The first question of a standard query, or a reason to refuse it. */
export function parseQuery(msg: Buffer): { id: number; flags: number; question: Question } | { id: number; flags: number; rcode: number } | null {
  if (msg.length < 12) return null
  const id = msg.readUInt16BE(0)
  const flags = msg.readUInt16BE(2)
  if (flags & 0x8000) return null // an answer, not a query: drop it
  if ((flags >> 11) & 0xf) return { id, flags, rcode: RCODE_NOTIMP }
  if (msg.readUInt16BE(4) !== 1) return { id, flags, rcode: RCODE_FORMERR }
  const labels: string[] = []
  let at = 12
  for (;;) {
    if (at >= msg.length) return { id, flags, rcode: RCODE_FORMERR }
    const len = msg[at]
    if (len === 0) break
    // Compression pointers and extended labels have no place in a question of one name.
    if (len > 63 || at + 1 + len > msg.length) return { id, flags, rcode: RCODE_FORMERR }
    labels.push(msg.subarray(at + 1, at + 1 + len).toString('latin1').toLowerCase())
    at += 1 + len
  }
  if (at + 5 > msg.length) return { id, flags, rcode: RCODE_FORMERR }
  const type = msg.readUInt16BE(at + 1)
  const klass = msg.readUInt16BE(at + 3)
  if (klass !== CLASS_IN) return { id, flags, rcode: RCODE_NOTIMP }
  return { id, flags, question: { name: labels.join('.'), type, raw: msg.subarray(12, at + 5) } }
}

export function buildAnswer(id: number, queryFlags: number, rcode: number, question: Question | null, addresses: string[] = []): Buffer {
  const header = Buffer.alloc(12)
  header.writeUInt16BE(id, 0)
  // QR, the query's RD, RA, and the rcode.
  header.writeUInt16BE(0x8000 | (queryFlags & 0x0100) | 0x0080 | rcode, 2)
  header.writeUInt16BE(question ? 1 : 0, 4)
  header.writeUInt16BE(addresses.length, 6)
  const parts = [header, question?.raw ?? Buffer.alloc(0)]
  for (const ip of addresses) {
    const v4 = net.isIPv4(ip)
    const rdata = v4 ? Buffer.from(ip.split('.').map(Number)) : ipv6ToBytes(ip)
    const rr = Buffer.alloc(12)
    rr.writeUInt16BE(0xc00c, 0) // the name: a pointer to the question's
    rr.writeUInt16BE(v4 ? TYPE_A : TYPE_AAAA, 2)
    rr.writeUInt16BE(CLASS_IN, 4)
    rr.writeUInt32BE(ANSWER_TTL_S, 6)
    rr.writeUInt16BE(rdata.length, 10)
    parts.push(rr, rdata)
  }
  return Buffer.concat(parts)
}


export interface ResolverPolicy {
  /** Whether a query from this peer is answered at all; the others are dropped. */
  admit(peerAddress: string, peerPort: number): Promise<boolean>
  /** null: the name may be resolved; otherwise why not. */
  refuse(name: string): string | null
  /** The addresses to answer for an allowed name (already filtered by the policy); a LookupFailure says why none. */
  addresses(name: string, family: 4 | 6): Promise<string[]>
  denied(name: string, reason: string): void
}

/** Listens on 127.0.0.1 (an ephemeral port); pasta forwards the sandbox's port 53 to it. */
export async function startResolver(policy: ResolverPolicy): Promise<{ port: number; close(): Promise<void> }> {
  const socket = dgram.createSocket('udp4')
  socket.on('error', () => {})
  socket.on('message', (msg, rinfo) => {
    void admitted(policy, rinfo.address, rinfo.port).then((ok) => (ok ? answer(policy, msg) : null)).then(
      (reply) => reply && socket.send(reply, rinfo.port, rinfo.address, () => {}),
      () => {},
    )
  })
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject)
    socket.bind(0, '127.0.0.1', () => {
      socket.removeListener('error', reject)
      resolve()
    })
  })
  return {
    port: socket.address().port,
    close: () => new Promise((resolve) => socket.close(() => resolve())),
  }
}

function admitted(policy: ResolverPolicy, peerAddress: string, peerPort: number): Promise<boolean> {
  return policy.admit(peerAddress, peerPort).catch(() => false)
}

const FAILURE_RCODE: Record<LookupFailure['kind'], number> = { 'no-such-name': RCODE_NXDOMAIN, 'no-data': 0, failed: RCODE_SERVFAIL, busy: RCODE_REFUSED }

async function answer(policy: ResolverPolicy, msg: Buffer): Promise<Buffer | null> {
  const q = parseQuery(msg)
  if (!q) return null
  if (!('question' in q)) return buildAnswer(q.id, q.flags, q.rcode, null)
  const { type } = q.question
  // One spelling of the name for the policy and the lookup (a label may hold a dot on the wire).
  const name = normalizeName(q.question.name)
  const reason = name === null ? `${JSON.stringify(q.question.name.slice(0, 255))} is not a valid host name` : policy.refuse(name)
  if (name === null || reason !== null) {
    policy.denied(name ?? q.question.name.slice(0, 255), reason!)
    return buildAnswer(q.id, q.flags, RCODE_NXDOMAIN, q.question)
  }
  // Other types of an allowed name: no data (NOERROR, no answers).
  const family = type === TYPE_A ? 4 : type === TYPE_AAAA ? 6 : null
  if (family === null) return buildAnswer(q.id, q.flags, 0, q.question)
  try {
    return buildAnswer(q.id, q.flags, 0, q.question, await policy.addresses(name, family))
  } catch (err) {
    return buildAnswer(q.id, q.flags, err instanceof LookupFailure ? FAILURE_RCODE[err.kind] : RCODE_SERVFAIL, q.question)
  }
}
