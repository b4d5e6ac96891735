/**
 * The sandbox's only way out: an HTTP proxy in the host process. HTTPS and any other TCP go
 * through CONNECT host:port; plain HTTP as absolute-form requests (`GET http://host/...`).
 * Each destination is routed by the policy before a byte leaves: a refusal is answered at
 * once (403, the reason in the body and in X-Krunbox-Denied), counted and reported.
 *
 * Only heads are parsed (http-head.ts); bodies go through as bytes both ways. A plain-HTTP
 * connection carries one request: it goes upstream in origin form, the answer comes back with
 * `Connection: close`, and whatever the client sent after the request's body is dropped, so
 * every request a client makes is checked on its own connection. The upstream side of a
 * bodiless request may be a connection an earlier answer left idle (upstream-pool.ts).
 */
import fs from 'node:fs'
import net from 'node:net'
import { UpstreamPool, type UpstreamPoolLimits } from './upstream-pool.js'
import {
  ChunkedBody,
  HeadError,
  parseRequestHead,
  requestBody,
  requestHeadEnd,
  ResponseHeads,
  responseBody,
  upstreamRequestHead,
  type RequestHead,
} from './http-head.js'

export type Route = { address: string } | { refused: string }

export interface ProxyPolicy {
  route(host: string, port: number): Promise<Route>
  denied(destination: string, reason: string): void
  allowed(destination: string): void
  /**
   * A request for the sandbox's own loopback, given back to the sandbox (proxy-handoff.ts): the
   * connection it continues on, an Error when it could not go back, or null when the request is
   * not for the sandbox's own loopback (it is routed).
   */
  handBack?(method: string, target: string, bytes: Buffer): net.Socket | Error | null
}

export interface ProxyLimits {
  /** Connections served at once; past it a connection is answered 503 and closed. */
  maxConnections?: number
  /** How long a connection may take to send its request's head (CONNECT or absolute-form). */
  headersTimeoutMs?: number
  /** Idle upstream connections kept for plain HTTP. */
  upstreamPool?: UpstreamPoolLimits
}

/** A sandbox's package manager opens tens of connections; hundreds more are a flood. */
export const PROXY_MAX_CONNECTIONS = 256
export const PROXY_HEADERS_TIMEOUT_MS = 10_000

const TOO_MANY = `HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nX-Krunbox-Denied: too many connections\r\nConnection: close\r\nContent-Length: 21\r\n\r\ntoo many connections\n`

/** `host:port` or `[v6]:port` of a CONNECT request, lower-cased, or null when malformed. */
export function parseAuthority(text: string): { host: string; port: number } | null {
  const m = /^(?:\[([0-9a-f:.]+)\]|([a-z0-9._-]+)):(\d{1,5})$/i.exec(text)
  if (!m) return null
  const port = Number(m[3])
  if (port < 1 || port > 65535) return null
  return { host: (m[1] ?? m[2]).toLowerCase(), port }
}

/** One printable line: the text names what the sandbox wrote. */
const printable = (text: string) => text.replace(/[^\x20-\x7e]/g, '?')

function answer(status: string, body: string, extra = ''): string {
  return `HTTP/1.1 ${status}\r\nContent-Type: text/plain\r\n${extra}Connection: close\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`
}

const refusal = (reason: string) =>
  answer('403 Forbidden', `${printable(reason)}\n`, `X-Krunbox-Denied: ${printable(reason)}\r\n`)
const badGateway = (destination: string, err: Error) =>
  answer(
    '502 Bad Gateway',
    `${printable(destination)}: ${printable(err.message)}\n`,
    `X-Krunbox-Error: ${printable(err.message)}\r\n`,
  )
const STATUS_TEXT: Record<number, string> = {
  400: 'Bad Request',
  431: 'Request Header Fields Too Large',
  502: 'Bad Gateway',
}

export interface Proxy {
  /** Accepts on a listening socket (the sandbox's own, handed over: proxy-handoff.ts); the proxy owns the fd. */
  adopt(fd: number): Promise<void>
  /** Serves one connection accepted elsewhere (tests and benches reach the proxy so); made with `allowHalfOpen`, as the proxy's own. */
  serve(client: net.Socket): void
  close(): Promise<void>
}

/** A proxy that accepts on the listeners it adopts. */
export function startProxy(policy: ProxyPolicy, limits: ProxyLimits = {}): Proxy {
  const maxConnections = limits.maxConnections ?? PROXY_MAX_CONNECTIONS
  const headersTimeoutMs = limits.headersTimeoutMs ?? PROXY_HEADERS_TIMEOUT_MS
  const sockets = new Set<net.Socket>()
  const timers = new Set<NodeJS.Timeout>()
  const pool = new UpstreamPool(limits.upstreamPool)
  let clients = 0
  const track = (s: net.Socket) => {
    sockets.add(s)
    s.once('close', () => sockets.delete(s))
    s.on('error', () => {})
  }
  /** A timer that dies with the socket (and with the proxy). */
  const deadline = (s: net.Socket, ms: number) => {
    const t = setTimeout(() => s.destroy(), ms)
    timers.add(t)
    const clear = () => {
      clearTimeout(t)
      timers.delete(t)
    }
    s.once('close', clear)
    return clear
  }
  /**
   * Answers and closes. What the client still sends is read and dropped until it closes (a
   * close with unread bytes would reset the connection and could lose the answer), for as long
   * as a head may take at most.
   */
  const finish = (client: net.Socket, text: string) => {
    client.removeAllListeners('data')
    client.on('data', () => {})
    client.once('end', () => client.destroy())
    client.resume()
    client.end(text)
    deadline(client, headersTimeoutMs)
  }

  const onConnection = (client: net.Socket) => {
    track(client)
    if (clients >= maxConnections) {
      client.end(TOO_MANY)
      client.destroySoon()
      return
    }
    clients++
    client.once('close', () => clients--)
    const headArrived = deadline(client, headersTimeoutMs)
    let buf: Buffer = Buffer.alloc(0)
    let headDone = false
    const onData = (chunk: Buffer) => {
      buf = buf.length === 0 ? chunk : Buffer.concat([buf, chunk])
      let end: number
      let head: RequestHead
      try {
        end = requestHeadEnd(buf)
        if (end < 0) return
        head = parseRequestHead(buf.subarray(0, end))
      } catch (err) {
        const status = err instanceof HeadError ? err.status : 0
        if (status === 0) client.destroy()
        else finish(client, answer(`${status} ${STATUS_TEXT[status]}`, `${(err as Error).message}\n`))
        return
      }
      headArrived()
      headDone = true
      client.removeListener('data', onData)
      client.pause()
      const read = buf
      const rest = buf.subarray(end)
      buf = Buffer.alloc(0)
      const back = policy.handBack?.(head.method, head.target, read)
      if (back instanceof Error) finish(client, badGateway(head.target, back))
      else if (back) join(client, back)
      else if (head.method === 'CONNECT') tunnel(client, head, rest)
      else forward(client, head, rest)
    }
    client.on('data', onData)
    // A client that ends before its head is complete gets nothing.
    client.once('end', () => headDone || client.destroy())
  }
  // allowHalfOpen: a client that shuts its side after sending still gets the answer.
  const serverOptions = { allowHalfOpen: true, noDelay: true }
  const servers: net.Server[] = []

  /** Bytes both ways until both directions ended (ends pass through the pipes); a failure of either side closes the other. */
  const join = (client: net.Socket, other: net.Socket) => {
    track(other)
    client.once('close', () => other.destroy())
    other.once('close', (failed) => failed && client.destroy())
    other.pipe(client)
    client.pipe(other)
    client.resume()
  }

  /** Ties an upstream to one client: the client's close closes it, its error is `failed`; the result unties them. */
  const tie = (client: net.Socket, upstream: net.Socket, failed: (err: Error) => void) => {
    const closed = () => upstream.destroy()
    client.once('close', closed)
    upstream.once('error', failed)
    return () => {
      client.removeListener('close', closed)
      upstream.removeListener('error', failed)
    }
  }

  /** Connects to the address the policy checked (never a second lookup); `then` once connected, with what unties it from the client. */
  const connect = (
    client: net.Socket,
    destination: string,
    address: string,
    port: number,
    halfOpen: boolean,
    then: (upstream: net.Socket, untie: () => void) => void,
  ) => {
    const upstream = net.connect({ host: address, port, allowHalfOpen: halfOpen, noDelay: true })
    track(upstream)
    let connected = false
    const untie = tie(client, upstream, (err) => {
      if (!connected && !client.destroyed) finish(client, badGateway(destination, err))
      else client.destroy()
    })
    upstream.once('connect', () => {
      connected = true
      then(upstream, untie)
    })
  }

  const tunnel = (client: net.Socket, head: RequestHead, rest: Buffer) => {
    const target = parseAuthority(head.target)
    if (!target) {
      policy.denied(head.target.slice(0, 200), 'malformed CONNECT target')
      finish(client, refusal('malformed CONNECT target'))
      return
    }
    routed(client, target.host, target.port, (address, destination) =>
      connect(client, destination, address, target.port, true, (upstream) => {
        client.write('HTTP/1.1 200 Connection Established\r\n\r\n')
        if (rest.length > 0) upstream.write(rest)
        // Half-closes pass both ways; the sockets close once both directions have ended.
        upstream.pipe(client)
        client.pipe(upstream)
        client.resume()
        policy.allowed(destination)
      }),
    )
  }

  const forward = (client: net.Socket, head: RequestHead, rest: Buffer) => {
    let url: URL
    try {
      url = new URL(head.target)
    } catch {
      finish(client, answer('400 Bad Request', 'this is a proxy: send absolute-form requests or CONNECT\n'))
      return
    }
    if (url.protocol !== 'http:') {
      finish(
        client,
        answer('400 Bad Request', `only http: URLs go in absolute form (use CONNECT for ${url.protocol})\n`),
      )
      return
    }
    let body: ReturnType<typeof requestBody>
    try {
      body = requestBody(head.headers)
    } catch (err) {
      finish(client, answer('400 Bad Request', `${(err as Error).message}\n`))
      return
    }
    const host = url.hostname.replace(/^\[|\]$/g, '').toLowerCase()
    const port = url.port === '' ? 80 : Number(url.port)
    // A body cannot be sent twice: only a bodiless request may go over a kept connection (and again on a new one if that fails).
    const persistent = body !== 'chunked' && body.length === 0
    routed(client, host, port, (address, destination) => {
      const key = `${address}:${port}`
      let counted = false
      const send = (upstream: net.Socket, untie: () => void, retry: (() => void) | null) => {
        // The Host field is the target's, whatever the client wrote (RFC 9112 3.2.2): the name checked is the name asked for.
        upstream.write(upstreamRequestHead(head, url.pathname + url.search, url.host, persistent))
        sendBody(client, upstream, body, rest)
        const keep = persistent
          ? () => {
              untie()
              pool.keep(key, upstream)
            }
          : null
        relayAnswer(client, upstream, head.method, destination, keep, retry && (() => (untie(), retry())))
        // Counted once per request (not again on a retry), once it is on its way: a count written to
        // disk (the keeper's) then overlaps the upstream's work.
        if (!counted) policy.allowed(destination)
        counted = true
      }
      const fresh = () =>
        connect(client, destination, address, port, false, (upstream, untie) => send(upstream, untie, null))
      const kept = persistent ? pool.take(key) : null
      if (!kept) return fresh()
      // Its failures before the answer starts are relayAnswer's: the request goes again on a new connection.
      send(
        kept,
        tie(client, kept, () => {}),
        fresh,
      )
    })
  }

  /** Asks the policy for host:port: `then` with the address it checked, or its refusal answered. */
  const routed = (
    client: net.Socket,
    host: string,
    port: number,
    then: (address: string, destination: string) => void,
  ) => {
    const destination = `${host}:${port}`
    void policy.route(host, port).then(
      (route) => {
        if (client.destroyed) return
        if ('refused' in route) {
          policy.denied(destination, route.refused)
          finish(client, refusal(route.refused))
          return
        }
        then(route.address, destination)
      },
      () => client.destroy(),
    )
  }

  /** The request's body, and not one byte past it (a pipelined request is dropped, never forwarded unchecked). */
  const sendBody = (client: net.Socket, upstream: net.Socket, body: ReturnType<typeof requestBody>, rest: Buffer) => {
    const chunked = body === 'chunked' ? new ChunkedBody() : null
    /** Bytes of the body still to come (Infinity: until the chunked body's end is seen). */
    let left = chunked ? Infinity : (body as { length: number }).length
    const take = (chunk: Buffer) => {
      // Past the body (a pipelined request: dropped), or the answer came whole before it did.
      if (left === 0 || upstream.destroyed) return
      let n: number
      try {
        n = chunked ? chunked.feed(chunk) : Math.min(chunk.length, left)
      } catch {
        client.destroy()
        return
      }
      if (!chunked) left -= n
      else if (n < 0) n = chunk.length
      else left = 0
      if (n > 0 && !upstream.write(n === chunk.length ? chunk : chunk.subarray(0, n))) {
        client.pause()
        upstream.once('drain', () => client.resume())
      }
    }
    client.on('data', take)
    if (rest.length > 0) take(rest)
    client.resume()
    // Ended before its body did: the request is incomplete.
    client.once('end', () => left > 0 && client.destroy())
  }

  /**
   * The answer: its head re-written (hop-by-hop fields dropped, Connection: close), then its
   * body's bytes, and no more. `keep` takes the upstream once the answer ended exactly where its
   * framing said (null: it is closed); `retry` sends the request again on a new connection when
   * this one ends or fails before answering (a kept connection the server closed meanwhile).
   */
  const relayAnswer = (
    client: net.Socket,
    upstream: net.Socket,
    method: string,
    destination: string,
    keep: (() => void) | null,
    retry: (() => void) | null,
  ) => {
    const heads = new ResponseHeads()
    let started = false
    let chunked: ChunkedBody | null = null
    /** Bytes of the body still to come (Infinity: until its end is seen or the upstream closes). */
    let left = 0
    /** Whether the connection may carry another request once the body ends. */
    let reusable = false
    const untie = () => {
      upstream.removeListener('data', onData)
      upstream.removeListener('end', onEnd)
      upstream.removeListener('error', onError)
    }
    const done = () => {
      if (keep && reusable) {
        untie()
        keep()
      } else upstream.destroy()
      client.end()
      // Read the client to its end (a close with unread bytes resets it), then close.
      deadline(client, headersTimeoutMs)
    }
    const body = (chunk: Buffer) => {
      let n: number
      try {
        n = chunked ? chunked.feed(chunk) : Math.min(chunk.length, left)
      } catch {
        upstream.destroy()
        client.destroy()
        return
      }
      if (chunked) {
        if (n < 0) n = chunk.length
        else left = 0
      } else left -= n
      // Bytes past the answer: the connection carries something no request asked for.
      if (n < chunk.length) reusable = false
      if (n > 0 && !client.write(n === chunk.length ? chunk : chunk.subarray(0, n))) {
        upstream.pause()
        client.once('drain', () => upstream.resume())
      }
      if (left === 0) done()
    }
    const again = () => {
      untie()
      upstream.destroy()
      retry!()
    }
    const onData = (chunk: Buffer) => {
      if (heads.done) return body(chunk)
      let got
      try {
        got = heads.next(chunk)
      } catch (err) {
        upstream.destroy()
        if (!started) finish(client, badGateway(destination, err as Error))
        else client.destroy()
        return
      }
      if (!got) return
      started = true
      // The head and the body's first bytes leave in one write.
      client.cork()
      client.write(got.out)
      if (heads.done) {
        const framing = responseBody(method, heads.status, heads.headers)
        chunked = framing === 'chunked' ? new ChunkedBody() : null
        left = framing === 'chunked' || framing === 'close' ? Infinity : framing.length
        reusable = heads.persistent && framing !== 'close'
        if (left === 0) {
          if (got.rest.length > 0) reusable = false
          done()
        } else if (got.rest.length > 0) body(got.rest)
      }
      client.uncork()
    }
    const onEnd = () => {
      if (!started && retry) again()
      else if (!started) finish(client, badGateway(destination, new Error('closed without an answer')))
      else if (left === Infinity && !chunked) done()
      else client.destroy()
    }
    const onError = () => {
      if (!started && retry) again()
      else client.destroy()
    }
    upstream.on('data', onData)
    upstream.once('end', onEnd)
    upstream.once('error', onError)
  }

  let closed = false
  return {
    adopt: (fd) => {
      if (closed) {
        fs.closeSync(fd)
        return Promise.resolve()
      }
      const server = net.createServer(serverOptions, onConnection)
      servers.push(server)
      return new Promise((resolve, reject) => {
        server.once('error', reject)
        server.listen({ fd }, () => {
          server.removeListener('error', reject)
          server.on('error', () => {})
          resolve()
        })
      })
    },
    serve: (client) => {
      client.setNoDelay(true)
      onConnection(client)
    },
    close: async () => {
      closed = true
      for (const timer of timers) clearTimeout(timer)
      pool.close()
      for (const s of sockets) s.destroy()
      await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))))
    },
  }
}
