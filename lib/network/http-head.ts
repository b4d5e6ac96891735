/**
 * The proxy's reading of HTTP/1.x (proxy.ts): a request's head, where its body ends, and the
 * head of the answer, each strict, so that what the policy checked is exactly what is
 * forwarded: one request per connection, every byte after its body dropped, never passed on.
 * Bodies themselves are not parsed; they go through as bytes.
 */

/** Node's own default (--max-http-header-size): a head past it is refused with 431. */
export const HEAD_MAX_BYTES = 16 * 1024
/** A chunk-size line or the trailer section past these is malformed. */
const CHUNK_LINE_MAX = 4096
const TRAILER_MAX_BYTES = HEAD_MAX_BYTES

/** Hop-by-hop headers: about one connection, never forwarded (Transfer-Encoding and Trailer stay: bodies go through as bytes, framed as they are). */
const HOP_BY_HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authorization',
  'proxy-authenticate',
  'te',
  'upgrade',
])

const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/
const FIELD_VALUE = /^[\t\x20-\x7e\x80-\xff]*$/
const REQUEST_LINE = /^([!#$%&'*+\-.^_`|~0-9A-Za-z]+) ([\x21-\x7e]+) (HTTP\/1\.[01])$/
const STATUS_LINE = /^HTTP\/1\.[01] ([1-9]\d\d)(?: [\t\x20-\x7e\x80-\xff]*)?$/

export type Headers = [name: string, value: string][]

export interface RequestHead {
  method: string
  target: string
  version: string
  headers: Headers
}

/** A head that cannot be forwarded: `status` is the answer, or 0 for garbage (closed unanswered). */
export class HeadError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message)
  }
}

/**
 * Where the head in `buf` ends (just past its blank line), -1 while it is incomplete. Throws as
 * soon as the bytes cannot be an HTTP request (garbage is closed at once, not after the timeout)
 * or the head passes HEAD_MAX_BYTES.
 */
export function requestHeadEnd(buf: Buffer): number {
  const end = buf.indexOf('\r\n\r\n')
  if (end >= 0 && end + 4 > HEAD_MAX_BYTES) throw new HeadError(431, 'request head too large')
  if (end < 0 && buf.length >= HEAD_MAX_BYTES) throw new HeadError(431, 'request head too large')
  const lineEnd = buf.indexOf('\r\n')
  const line = buf.toString('latin1', 0, lineEnd < 0 ? buf.length : lineEnd)
  if (/[^\x21-\x7e ]/.test(line)) throw new HeadError(0, 'not an HTTP request')
  return end < 0 ? -1 : end + 4
}

/** The request line and fields of a complete head (as requestHeadEnd found it). */
export function parseRequestHead(head: Buffer): RequestHead {
  const [line, ...fields] = head.toString('latin1', 0, head.length - 4).split('\r\n')
  const m = REQUEST_LINE.exec(line)
  if (!m) throw new HeadError(0, 'not an HTTP request line')
  return { method: m[1], target: m[2], version: m[3], headers: parseFields(fields) }
}

function parseFields(lines: string[]): Headers {
  const out: Headers = []
  for (const line of lines) {
    const colon = line.indexOf(':')
    // No obsolete line folding, no space before the colon (RFC 9112 5.1, 5.2): both are smuggling tools.
    const name = colon > 0 ? line.slice(0, colon) : ''
    const value = line.slice(colon + 1).replace(/^[ \t]+|[ \t]+$/g, '')
    if (!TOKEN.test(name) || !FIELD_VALUE.test(value)) throw new HeadError(400, 'malformed header field')
    out.push([name, value])
  }
  return out
}

const values = (headers: Headers, name: string) => headers.filter(([n]) => n.toLowerCase() === name).map(([, v]) => v)

/** How a request's body is framed: its length (0: none) or chunked. Anything ambiguous is refused. */
export function requestBody(headers: Headers): { length: number } | 'chunked' {
  const te = values(headers, 'transfer-encoding')
  const cl = values(headers, 'content-length')
  if (te.length > 0) {
    // Both, or any coding but chunked alone: two parsers could end the body in two places.
    if (cl.length > 0) throw new HeadError(400, 'both Content-Length and Transfer-Encoding')
    if (te.length !== 1 || te[0].toLowerCase() !== 'chunked')
      throw new HeadError(400, `unsupported Transfer-Encoding ${JSON.stringify(te.join(', '))}`)
    return 'chunked'
  }
  const lengths = new Set(cl.flatMap((v) => v.split(',').map((s) => s.trim())))
  if (lengths.size === 0) return { length: 0 }
  const [only] = lengths
  if (lengths.size > 1 || !/^\d{1,15}$/.test(only))
    throw new HeadError(400, `bad Content-Length ${JSON.stringify(cl.join(', '))}`)
  return { length: Number(only) }
}

/**
 * The head sent upstream: origin-form, Host from the checked target, hop-by-hop fields dropped.
 * `persistent`: the connection may carry a later request (upstream-pool.ts); otherwise it says
 * Connection: close.
 */
export function upstreamRequestHead(head: RequestHead, originForm: string, host: string, persistent = false): string {
  let out = `${head.method} ${originForm} ${head.version}\r\nHost: ${host}\r\n`
  for (const [name, value] of endToEnd(head.headers)) if (name.toLowerCase() !== 'host') out += `${name}: ${value}\r\n`
  return out + (persistent ? '\r\n' : 'Connection: close\r\n\r\n')
}

/** The tokens of every Connection field, lower-cased. */
const connectionTokens = (headers: Headers) =>
  new Set(values(headers, 'connection').flatMap((v) => v.split(',').map((s) => s.trim().toLowerCase())))

/** Fields without the hop-by-hop ones, and without those the Connection field names. */
function endToEnd(headers: Headers): Headers {
  const named = connectionTokens(headers)
  return headers.filter(([name]) => !HOP_BY_HOP.has(name.toLowerCase()) && !named.has(name.toLowerCase()))
}

/**
 * The answer's heads: interim (1xx) heads pass as they are; the final one is re-written without
 * hop-by-hop fields and with Connection: close (the client asks again on a new connection, so
 * each request is checked). `next` returns the re-written bytes and the rest, or null while the
 * head is incomplete; it throws on a malformed or oversized head.
 */
export class ResponseHeads {
  #buf: Buffer = Buffer.alloc(0)
  done = false
  /** The final answer's status and fields, once done. */
  status = 0
  headers: Headers = []
  /** The upstream keeps its connection open after this answer (HTTP/1.1, no Connection: close). */
  persistent = false

  next(chunk: Buffer): { out: Buffer; rest: Buffer } | null {
    this.#buf = this.#buf.length === 0 ? chunk : Buffer.concat([this.#buf, chunk])
    const parts: Buffer[] = []
    for (;;) {
      const end = this.#buf.indexOf('\r\n\r\n')
      if (end < 0 || end + 4 > HEAD_MAX_BYTES) {
        if (this.#buf.length >= HEAD_MAX_BYTES) throw new HeadError(502, 'response head too large')
        if (parts.length > 0) {
          // Interim heads go on at once (a client waiting for 100 Continue).
          const out = Buffer.concat(parts)
          return { out, rest: Buffer.alloc(0) }
        }
        return null
      }
      const [line, ...fields] = this.#buf.toString('latin1', 0, end).split('\r\n')
      const m = STATUS_LINE.exec(line)
      if (!m) throw new HeadError(502, 'not an HTTP response')
      const status = Number(m[1])
      const headers = parseFields(fields)
      const rest = this.#buf.subarray(end + 4)
      if (status < 200 && status !== 101) {
        parts.push(this.#buf.subarray(0, end + 4))
        this.#buf = rest
        continue
      }
      let head = `${line}\r\n`
      for (const [name, value] of endToEnd(headers)) head += `${name}: ${value}\r\n`
      parts.push(Buffer.from(head + 'Connection: close\r\n\r\n', 'latin1'))
      this.done = true
      this.status = status
      this.headers = headers
      this.persistent = line.startsWith('HTTP/1.1 ') && status !== 101 && !connectionTokens(headers).has('close')
      this.#buf = Buffer.alloc(0)
      return { out: Buffer.concat(parts), rest }
    }
  }
}

/**
 * How an answer's body is framed (RFC 9112 6.3): none, its length, chunked, or up to the
 * close. An upstream that keeps its connection open past the answer is not waited for.
 */
export function responseBody(
  method: string,
  status: number,
  headers: Headers,
): { length: number } | 'chunked' | 'close' {
  if (method === 'HEAD' || status === 204 || status === 304 || status < 200) return { length: 0 }
  const te = values(headers, 'transfer-encoding')
  if (te.length > 0) return /(^|,)\s*chunked\s*$/i.test(te.join(',')) ? 'chunked' : 'close'
  const cl = new Set(values(headers, 'content-length').flatMap((v) => v.split(',').map((s) => s.trim())))
  const [only] = cl
  if (cl.size !== 1 || !/^\d{1,15}$/.test(only)) return 'close'
  return { length: Number(only) }
}

/** Finds the end of a chunked body in the bytes fed to it (the bytes themselves go through unchanged). */
export class ChunkedBody {
  #state: 'size' | 'data' | 'data-end' | 'trailer' = 'size'
  #line = ''
  #left = 0
  #trailerBytes = 0

  /** How many bytes of `buf` belong to the body when it ends in them, -1 when all do and it goes on. Throws on malformed framing. */
  feed(buf: Buffer): number {
    let i = 0
    while (i < buf.length) {
      if (this.#state === 'data') {
        const n = Math.min(this.#left, buf.length - i)
        i += n
        this.#left -= n
        if (this.#left === 0) this.#state = 'data-end'
        continue
      }
      const nl = buf.indexOf(0x0a, i)
      const end = nl < 0 ? buf.length : nl + 1
      this.#line += buf.toString('latin1', i, end)
      i = end
      if (this.#line.length > CHUNK_LINE_MAX) throw new HeadError(400, 'chunk line too long')
      if (nl < 0) break
      if (!this.#line.endsWith('\r\n')) throw new HeadError(400, 'bare LF in chunked body')
      const text = this.#line.slice(0, -2)
      this.#line = ''
      if (this.#state === 'data-end') {
        if (text !== '') throw new HeadError(400, 'chunk data longer than its size')
        this.#state = 'size'
      } else if (this.#state === 'size') {
        const m = /^([0-9a-fA-F]{1,13})(;[\t\x20-\x7e\x80-\xff]*)?$/.exec(text)
        if (!m) throw new HeadError(400, 'malformed chunk size')
        this.#left = parseInt(m[1], 16)
        this.#state = this.#left === 0 ? 'trailer' : 'data'
      } else {
        if (text === '') return i
        this.#trailerBytes += text.length + 2
        if (this.#trailerBytes > TRAILER_MAX_BYTES) throw new HeadError(400, 'trailer section too large')
        parseFields([text])
      }
    }
    return -1
  }
}
