/**
 * The sandbox's resolver, in the host process: it answers A and AAAA queries for the names
 * the policy allows (with the caller's pinned address or a bounded DNS lookup, lookups.ts) and
 * NXDOMAIN for every other name; REFUSED when the sandbox has too many lookups in flight,
 * SERVFAIL when the upstream failed. Only the first question of a query is read; anything that
 * is not a standard query is answered FORMERR/NOTIMP, never crashes the host. It listens on a
 * unix socket in the sandbox's control directory that only the sandbox's ids may connect to.
 */
import net from 'node:net'
import { ipv6ToBytes, normalizeName } from './address.js'
import { listenPrivate, type EgressSocket } from './egress-socket.js'
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
export function parseQuery(
  msg: Buffer,
): { id: number; flags: number; question: Question } | { id: number; flags: number; rcode: number } | null {
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
    labels.push(
      msg
        .subarray(at + 1, at + 1 + len)
        .toString('latin1')
        .toLowerCase(),
    )
    at += 1 + len
  }
  if (at + 5 > msg.length) return { id, flags, rcode: RCODE_FORMERR }
  const type = msg.readUInt16BE(at + 1)
  const klass = msg.readUInt16BE(at + 3)
  if (klass !== CLASS_IN) return { id, flags, rcode: RCODE_NOTIMP }
  return { id, flags, question: { name: labels.join('.'), type, raw: msg.subarray(12, at + 5) } }
}

export function buildAnswer(
  id: number,
  queryFlags: number,
  rcode: number,
  question: Question | null,
  addresses: string[] = [],
): Buffer {
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
  /** null: the name may be resolved; otherwise why not. */
  refuse(name: string): string | null
  /** The addresses to answer for an allowed name (already filtered by the policy); a LookupFailure says why none. */
  addresses(name: string, family: 4 | 6): Promise<string[]>
  denied(name: string, reason: string): void
}

export interface ResolverLimits {
  /** Connections served at once (the relay opens one per UDP query); past it one is closed at once. */
  maxConnections?: number
  /** A connection with no query and no answer pending for this long is closed. */
  idleTimeoutMs?: number
}

export const RESOLVER_MAX_CONNECTIONS = 64
export const RESOLVER_IDLE_TIMEOUT_MS = 10_000
/** Queries of one connection answered at once; past it the connection is not read until one is. */
const PIPELINED_QUERIES = 4

/**
 * Listens on the unix socket `socket.path` (the sandbox's relay connects there, agent/egress):
 * DNS over a stream, each message after its 2-byte length (RFC 1035 4.2.2), as TCP port 53
 * carries it; the relay wraps each UDP query so. Anything that is not a query closes the
 * connection, so a relay waiting for an answer learns at once there is none.
 */
export async function startResolver(
  policy: ResolverPolicy,
  socket: EgressSocket,
  limits: ResolverLimits = {},
): Promise<{ close(): Promise<void> }> {
  const maxConnections = limits.maxConnections ?? RESOLVER_MAX_CONNECTIONS
  const idleTimeoutMs = limits.idleTimeoutMs ?? RESOLVER_IDLE_TIMEOUT_MS
  const sockets = new Set<net.Socket>()
  const server = net.createServer((socket) => {
    socket.on('error', () => {})
    if (sockets.size >= maxConnections) {
      socket.destroy()
      return
    }
    sockets.add(socket)
    socket.once('close', () => sockets.delete(socket))
    socket.setTimeout(idleTimeoutMs, () => socket.destroy())
    serveStream(policy, socket)
  })
  await listenPrivate(server, socket.path, socket.stagingDir, socket.owner)
  return {
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy()
        server.close(() => resolve())
      }),
  }
}

function serveStream(policy: ResolverPolicy, socket: net.Socket): void {
  let buffered: Buffer = Buffer.alloc(0)
  let pending = 0
  const next = () => {
    while (pending < PIPELINED_QUERIES && buffered.length >= 2) {
      const size = buffered.readUInt16BE(0)
      if (buffered.length < 2 + size) break
      const msg = buffered.subarray(2, 2 + size)
      buffered = buffered.subarray(2 + size)
      pending++
      void answer(policy, msg).then(
        (reply) => {
          pending--
          if (socket.destroyed) return
          if (!reply) return void socket.destroy()
          const head = Buffer.alloc(2)
          head.writeUInt16BE(reply.length)
          socket.write(Buffer.concat([head, reply]))
          next()
        },
        () => socket.destroy(),
      )
    }
    // Read on only while the queries read so far are being answered: a bounded buffer.
    if (pending >= PIPELINED_QUERIES) socket.pause()
    else socket.resume()
  }
  socket.on('data', (d: Buffer) => {
    buffered = buffered.length === 0 ? d : Buffer.concat([buffered, d])
    next()
  })
}

const FAILURE_RCODE: Record<LookupFailure['kind'], number> = {
  'no-such-name': RCODE_NXDOMAIN,
  'no-data': 0,
  failed: RCODE_SERVFAIL,
  busy: RCODE_REFUSED,
}

async function answer(policy: ResolverPolicy, msg: Buffer): Promise<Buffer | null> {
  const q = parseQuery(msg)
  if (!q) return null
  if (!('question' in q)) return buildAnswer(q.id, q.flags, q.rcode, null)
  const { type } = q.question
  // One spelling of the name for the policy and the lookup (a label may hold a dot on the wire).
  const name = normalizeName(q.question.name)
  const reason =
    name === null ? `${JSON.stringify(q.question.name.slice(0, 255))} is not a valid host name` : policy.refuse(name)
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
    return buildAnswer(
      q.id,
      q.flags,
      err instanceof LookupFailure ? FAILURE_RCODE[err.kind] : RCODE_SERVFAIL,
      q.question,
    )
  }
}
