/**
 * The sandbox's only way out: an HTTP proxy in the host process. HTTPS and any other TCP go
 * through CONNECT host:port; plain HTTP as absolute-form requests (`GET http://host/...`).
 * Each destination is routed by the policy before a byte leaves: a refusal is answered at
 * once (403, the reason in the body and in X-Krunbox-Denied), counted and reported.
 */
import http from 'node:http'
import net from 'node:net'
import { listenPrivate, type EgressSocket } from './egress-socket.js'

export type Route = { address: string } | { refused: string }

export interface ProxyPolicy {
  route(host: string, port: number): Promise<Route>
  denied(destination: string, reason: string): void
  allowed(destination: string): void
}

export interface ProxyLimits {
  /** Connections served at once; past it a connection is answered 503 and closed. */
  maxConnections?: number
  /** How long a connection may take to send its first request (CONNECT or absolute-form). */
  headersTimeoutMs?: number
}

/** A sandbox's package manager opens tens of connections; hundreds more are a flood. */
export const PROXY_MAX_CONNECTIONS = 256
export const PROXY_HEADERS_TIMEOUT_MS = 10_000

const TOO_MANY = `HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nX-Krunbox-Denied: too many connections\r\nConnection: close\r\nContent-Length: 21\r\n\r\ntoo many connections\n`

const HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'proxy-authorization', 'proxy-authenticate', 'te', 'trailer', 'transfer-encoding', 'upgrade'])

/** `host:port` or `[v6]:port` of a CONNECT request, lower-cased, or null when malformed. */
export function parseAuthority(text: string): { host: string; port: number } | null {
  const m = /^(?:\[([0-9a-f:.]+)\]|([a-z0-9._-]+)):(\d{1,5})$/i.exec(text)
  if (!m) return null
  const port = Number(m[3])
  if (port < 1 || port > 65535) return null
  return { host: (m[1] ?? m[2]).toLowerCase(), port }
}

function refusal(reason: string): string {
  // The reason names a destination the sandbox chose: keep it to one printable line.
  const line = reason.replace(/[^\x20-\x7e]/g, '?')
  return `HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain\r\nX-Krunbox-Denied: ${line}\r\nConnection: close\r\nContent-Length: ${line.length + 1}\r\n\r\n${line}\n`
}

/** Listens on the unix socket `socket.path` (the sandbox's relay connects there, agent/egress). */
export async function startProxy(policy: ProxyPolicy, socket: EgressSocket, limits: ProxyLimits = {}): Promise<{ close(): Promise<void> }> {
  const maxConnections = limits.maxConnections ?? PROXY_MAX_CONNECTIONS
  const headersTimeoutMs = limits.headersTimeoutMs ?? PROXY_HEADERS_TIMEOUT_MS
  const sockets = new Set<net.Socket>()
  let clients = 0
  /** Clients that have not sent their first request yet, and the timer that closes them. */
  const waitingForRequest = new Map<net.Socket, NodeJS.Timeout>()
  const requestArrived = (socket: net.Socket) => {
    clearTimeout(waitingForRequest.get(socket))
    waitingForRequest.delete(socket)
  }
  const track = (s: net.Socket) => {
    sockets.add(s)
    s.once('close', () => sockets.delete(s))
    s.on('error', () => {})
  }
  const server = http.createServer()
  server.on('connection', (socket: net.Socket) => {
    track(socket)
    if (clients >= maxConnections) {
      socket.end(TOO_MANY)
      socket.destroySoon()
      return
    }
    clients++
    socket.once('close', () => {
      clients--
      requestArrived(socket)
    })
    waitingForRequest.set(
      socket,
      setTimeout(() => socket.destroy(), headersTimeoutMs),
    )
  })
  server.on('clientError', (_err, socket) => socket.destroy())
  server.on('connect', (req: http.IncomingMessage, client: net.Socket, head: Buffer) => {
    requestArrived(client)
    const target = parseAuthority(req.url ?? '')
    if (!target) {
      policy.denied(String(req.url).slice(0, 200), 'malformed CONNECT target')
      client.end(refusal(`malformed CONNECT target`))
      return
    }
    const destination = `${target.host}:${target.port}`
    void policy.route(target.host, target.port).then((route) => {
      if ('refused' in route) {
        policy.denied(destination, route.refused)
        client.end(refusal(route.refused))
        return
      }
      const upstream = net.connect({ host: route.address, port: target.port })
      track(upstream)
      upstream.once('connect', () => {
        policy.allowed(destination)
        client.write('HTTP/1.1 200 Connection Established\r\n\r\n')
        if (head.length > 0) upstream.write(head)
        upstream.pipe(client)
        client.pipe(upstream)
      })
      upstream.once('error', (err) => {
        if (!client.destroyed) client.end(`HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\nContent-Length: 0\r\nX-Krunbox-Error: ${err.message.replace(/[^\x20-\x7e]/g, '?')}\r\n\r\n`)
      })
      client.once('close', () => upstream.destroy())
      upstream.once('close', () => client.destroy())
    }, () => client.destroy())
  })
  server.on('request', (req, res) => {
    requestArrived(req.socket)
    let url: URL
    try {
      url = new URL(req.url ?? '')
    } catch {
      res.writeHead(400, { 'Content-Type': 'text/plain', Connection: 'close' }).end('this is a proxy: send absolute-form requests or CONNECT\n')
      return
    }
    if (url.protocol !== 'http:') {
      res.writeHead(400, { 'Content-Type': 'text/plain', Connection: 'close' }).end(`only http: URLs go in absolute form (use CONNECT for ${url.protocol})\n`)
      return
    }
    const host = url.hostname.replace(/^\[|\]$/g, '').toLowerCase()
    const port = url.port === '' ? 80 : Number(url.port)
    const destination = `${host}:${port}`
    void policy.route(host, port).then((route) => {
      if ('refused' in route) {
        policy.denied(destination, route.refused)
        const line = route.refused.replace(/[^\x20-\x7e]/g, '?')
        res.writeHead(403, { 'Content-Type': 'text/plain', 'X-Krunbox-Denied': line, Connection: 'close' }).end(line + '\n')
        return
      }
      const headers: http.OutgoingHttpHeaders = {}
      for (const [k, v] of Object.entries(req.headers)) if (!HOP_BY_HOP.has(k) && v !== undefined) headers[k] = v
      const upstream = http.request({ host: route.address, port, method: req.method, path: url.pathname + url.search, headers, agent: false, setHost: false }, (up) => {
        policy.allowed(destination)
        const out: http.OutgoingHttpHeaders = {}
        for (const [k, v] of Object.entries(up.headers)) if (!HOP_BY_HOP.has(k) && v !== undefined) out[k] = v
        res.writeHead(up.statusCode ?? 502, out)
        up.pipe(res)
        up.on('error', () => res.destroy())
      })
      upstream.on('error', (err) => {
        if (!res.headersSent) res.writeHead(502, { 'Content-Type': 'text/plain', Connection: 'close' }).end(`${destination}: ${err.message}\n`)
        else res.destroy()
      })
      req.pipe(upstream)
      res.once('close', () => upstream.destroy())
    }, () => res.destroy())
  })
  await listenPrivate(server, socket.path, socket.stagingDir, socket.owner)
  return {
    close: () =>
      new Promise((resolve) => {
        for (const timer of waitingForRequest.values()) clearTimeout(timer)
        for (const s of sockets) s.destroy()
        server.close(() => resolve())
      }),
  }
}
