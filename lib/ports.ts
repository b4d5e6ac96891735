/**
 * Ports: a TCP connection to a port on the sandbox's loopback, carried over the agent
 * connection as one protocol stream (`port.connect`, PROTOCOL.md "Ports"), so it needs no
 * network of the sandbox's own and works from any process that attached; and forward(), a
 * listener on the host's 127.0.0.1 that opens one such connection per client of this process's
 * own user (every local user can connect to 127.0.0.1; allowOtherUsers serves them all).
 *
 * Memory stays bounded both ways: bytes from the sandbox are only granted credit once the
 * reader has taken them, and bytes to the sandbox are only sent against the agent's credit,
 * so a slow reader on either end slows the writer on the other through TCP.
 */
import { EventEmitter } from 'node:events'
import net from 'node:net'
import { Duplex, finished } from 'node:stream'
import { SandboxError } from './errors.js'
import { describe, optionalAbortSignal, optionalBoolean, optionsObject, intInRange } from './options.js'
import type { AgentConnection, AgentStream } from './protocol/client.js'
import { peerIsOwnUser } from './network/loopback-peer.js'

import { PORT_BUFFER_BYTES, PORT_CONNECT_TIMEOUT_MS } from './defaults.js'
import { assertInternal, INTERNAL } from './internal.js'
import { errors } from './protocol/errors.gen.js'

// The connect timeout: the agent gives up dialing after 30 s (a listener with a full backlog), so
// the host waits a little longer (PORT_CONNECT_TIMEOUT_MS). The socket buffer: Node's 16 KiB default
// made a forward pause and resume its client for every 64 KiB read (PORT_BUFFER_BYTES).

/** What this module does to its sockets and forwards and a caller must not (never exported). */
interface SocketControl {
  create(port: number, allowHalfOpen: boolean): PortSocket
  bind(socket: PortSocket, stream: AgentStream<'port.connect'>): void
  /** Bytes from the service. */
  receive(socket: PortSocket, data: Buffer): void
  /** The service ended its side. */
  receiveEnd(socket: PortSocket): void
}
interface ForwardControl {
  create(server: net.Server, sandboxPort: number, unwatch: () => void): PortForward
  track(forward: PortForward, client: net.Socket): void
}
let socketControl!: SocketControl
let forwardControl!: ForwardControl

export interface PortConnectOptions {
  /** How long to wait for the service to accept (default 35 s): S200 past it. */
  timeoutMs?: number
  signal?: AbortSignal
  /** As for net.Socket: false (default) ends our side once the service has ended its side. */
  allowHalfOpen?: boolean
}

export interface PortForwardOptions {
  /** Host port to listen on (127.0.0.1); 0 or absent picks a free one. */
  hostPort?: number
  /**
   * false (default): only connections from this process's own user are carried (the owner of
   * the connecting socket, from the kernel's tables); another local user's are closed. true
   * serves every local user, as any listener on 127.0.0.1 would.
   */
  allowOtherUsers?: boolean
}

/** The events a sandbox emits that a forward listens to (Sandbox, without importing it). */
interface SandboxLike {
  readonly id: string
  once(event: 'destroyed', listener: () => void): unknown
  removeListener(event: 'destroyed', listener: () => void): unknown
}

/** A TCP port number (bad ones are S001: a port is a name, not a quantity); min 0 lets the kernel pick. */
function tcpPort(value: unknown, name: string, min = 1): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > 65535) {
    throw errors.badArgument({ subject: `${name}`, problem: `must be an integer ${min}-65535, got ${describe(value)}` })
  }
  return value
}

/**
 * A connection to a port inside the sandbox, used like a net.Socket: a Duplex with
 * remotePort, bytesRead/bytesWritten and the usual end()/destroy() semantics. A failure
 * (the service reset it: S231; the sandbox stopped: S004/S205) destroys it with that
 * error; it is in `errored` and on 'close' even when nobody listens for 'error'.
 */
export class PortSocket extends Duplex {
  readonly remoteAddress = '127.0.0.1'
  readonly remoteFamily = 'IPv4'
  readonly remotePort: number
  bytesRead = 0
  bytesWritten = 0
  #stream: AgentStream<'port.connect'> | null = null
  /** Bytes pushed while the readable buffer was full: credit for them waits for _read. */
  #owed = 0

  static {
    socketControl = {
      create: (port, allowHalfOpen) => new this(INTERNAL, port, allowHalfOpen),
      bind: (socket, stream) => (socket.#stream = stream),
      receive: (socket, data) => socket.#receive(data),
      receiveEnd: (socket) => socket.#receiveEnd(),
    }
  }

  /** Use sandbox.connect(). */
  private constructor(key: typeof INTERNAL, port: number, allowHalfOpen: boolean) {
    assertInternal(key, 'PortSocket', 'sandbox.connect()')
    super({ allowHalfOpen, highWaterMark: PORT_BUFFER_BYTES })
    this.remotePort = port
    // A library must not crash its host: an unobserved failure only destroys the socket.
    this.on('error', () => {})
  }

  #receive(data: Buffer): void {
    if (this.destroyed) return
    this.bytesRead += data.length
    if (this.push(data)) this.#stream?.consumed(data.length)
    else this.#owed += data.length
  }

  #receiveEnd(): void {
    if (!this.destroyed && !this.readableEnded) this.push(null)
  }

  /** @internal Duplex's implementation hook (Duplex declares it). */
  override _read(): void {
    if (this.#owed === 0) return
    const n = this.#owed
    this.#owed = 0
    this.#stream?.consumed(n)
  }

  /** @internal Duplex's implementation hook (Duplex declares it). */
  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.bytesWritten += chunk.length
    this.#stream!.sendData(chunk).then(() => callback(), callback)
  }

  /** @internal Duplex's implementation hook (Duplex declares it). */
  override _final(callback: (error?: Error | null) => void): void {
    this.#stream!.endData().then(() => callback(), callback)
  }

  /** @internal Duplex's implementation hook (Duplex declares it). */
  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    // The agent closes its TCP socket when the stream is cancelled.
    if (this.#stream && !this.#stream.done)
      this.#stream.cancel(
        errors.aborted({ subject: `connection to port ${this.remotePort}`, problem: 'was closed by the host' }),
      )
    callback(error)
  }

  /** net.Socket compatibility (http clients call these); Nagle and keep-alive do not apply here. */
  setNoDelay(): this {
    return this
  }
  setKeepAlive(): this {
    return this
  }
}

/** Opens a connection to 127.0.0.1:port inside the sandbox; resolves once the service accepted it. */
export async function connectPort(
  connection: () => AgentConnection,
  port: unknown,
  options?: PortConnectOptions,
): Promise<PortSocket> {
  const p = tcpPort(port, 'port')
  const o = optionsObject(options, 'connect options', ['timeoutMs', 'signal', 'allowHalfOpen'])
  const timeoutMs = intInRange(
    o.timeoutMs,
    'timeoutMs',
    1,
    PORT_CONNECT_TIMEOUT_MS.max,
    PORT_CONNECT_TIMEOUT_MS.default,
  )
  const signal = optionalAbortSignal(o.signal, 'signal')
  const allowHalfOpen = optionalBoolean(o.allowHalfOpen, 'allowHalfOpen', false)
  if (signal?.aborted)
    throw errors.aborted(
      { subject: `connect to port ${p}`, problem: 'was aborted before it began' },
      { cause: signal.reason },
    )
  const conn = connection()
  const socket = socketControl.create(p, allowHalfOpen)
  let onConnected = () => {}
  const stream = conn.request(
    'port.connect',
    { port: p },
    {
      manualCredit: true,
      onData: (data) => socketControl.receive(socket, data),
      onEvent: (event) => {
        if (event.type === 'connected') onConnected()
        else if (event.type === 'eof') socketControl.receiveEnd(socket)
      },
    },
  )
  socketControl.bind(socket, stream)
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(
      () =>
        stream.cancel(
          errors.timedOut({
            subject: `port ${p} in sandbox ${conn.hello.sandboxId}`,
            problem: `did not accept a connection within ${timeoutMs} ms`,
          }),
        ),
      timeoutMs,
    )
    const onAbort = () =>
      stream.cancel(
        errors.aborted({ subject: `connect to port ${p}`, problem: 'was aborted' }, { cause: signal?.reason }),
      )
    signal?.addEventListener('abort', onAbort, { once: true })
    const settle = (error: SandboxError | null) => {
      clearTimeout(timer)
      signal?.removeEventListener('abort', onAbort)
      if (error) reject(error)
      else resolve()
    }
    onConnected = () => settle(null)
    stream.result.catch((error: SandboxError) => settle(error))
  })
  // Both directions over: the agent answered. A failure after connecting ends the socket with it.
  stream.result.then(
    () => socketControl.receiveEnd(socket),
    (error: SandboxError) => {
      if (!socket.destroyed) socket.destroy(error)
    },
  )
  return socket
}

export interface PortForwardEvents {
  /** A client's connection could not be carried to the sandbox (S230: nothing listens yet). */
  connectionError: [error: SandboxError]
  close: []
}

/**
 * A listener on the host's 127.0.0.1 whose every connection is carried to a port of the
 * sandbox. It closes, with every connection it carries, on close() or when the sandbox ends.
 */
export class PortForward extends EventEmitter<PortForwardEvents> {
  /** The host port listened on. */
  readonly port: number
  readonly sandboxPort: number
  #server: net.Server
  #clients = new Set<net.Socket>()
  #closed: Promise<void> | null = null
  #unwatch: () => void

  static {
    forwardControl = {
      create: (server, sandboxPort, unwatch) => new this(INTERNAL, server, sandboxPort, unwatch),
      track: (forward, client) => forward.#track(client),
    }
  }

  /** Use sandbox.forward(). */
  private constructor(key: typeof INTERNAL, server: net.Server, sandboxPort: number, unwatch: () => void) {
    assertInternal(key, 'PortForward', 'sandbox.forward()')
    super()
    this.#server = server
    this.port = (server.address() as net.AddressInfo).port
    this.sandboxPort = sandboxPort
    this.#unwatch = unwatch
  }

  #track(client: net.Socket): void {
    this.#clients.add(client)
    client.once('close', () => this.#clients.delete(client))
  }

  get connections(): number {
    return this.#clients.size
  }

  /** Stops listening and ends every forwarded connection. */
  close(): Promise<void> {
    this.#closed ??= new Promise<void>((resolve) => {
      this.#unwatch()
      this.#server.close(() => resolve())
      for (const client of this.#clients) client.destroy()
    }).then(() => {
      this.emit('close')
    })
    return this.#closed
  }
}

/** Listens on 127.0.0.1:hostPort and carries every connection to the sandbox's port. */
export async function forwardPort(
  sandbox: SandboxLike,
  connection: () => AgentConnection,
  port: unknown,
  options?: PortForwardOptions,
): Promise<PortForward> {
  const p = tcpPort(port, 'port')
  const o = optionsObject(options, 'forward options', ['hostPort', 'allowOtherUsers'])
  const hostPort = o.hostPort === undefined ? 0 : tcpPort(o.hostPort, 'hostPort', 0)
  const allowOtherUsers = optionalBoolean(o.allowOtherUsers, 'allowOtherUsers', false)
  connection() // a stopped sandbox fails here (S004), before anything listens
  // Half-closes pass through as they are; the client stays paused until its sandbox side exists.
  const server = net.createServer({ allowHalfOpen: true, pauseOnConnect: true })
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(
        errors.portListenFailed(
          { hostPort, port: p, sandboxId: sandbox.id, reason: err.code ?? err.message },
          { cause: err },
        ),
      ),
    )
    server.listen({ host: '127.0.0.1', port: hostPort }, () => resolve())
  })
  server.on('error', () => {}) // after listening, errors (EMFILE on accept) only drop that client
  const onDestroyed = () => void forward.close()
  sandbox.once('destroyed', onDestroyed)
  const forward = forwardControl.create(server, p, () => sandbox.removeListener('destroyed', onDestroyed))
  server.on('connection', (client) => {
    client.on('error', () => {})
    forwardControl.track(forward, client)
    // The client stays paused (pauseOnConnect) until its owner is known: nothing reaches the sandbox before.
    const admitted = allowOtherUsers ? Promise.resolve(true) : peerIsOwnUser(client).catch(() => false)
    void admitted.then((ok) => {
      if (ok) carry(client)
      else client.resetAndDestroy()
    })
  })
  const carry = (client: net.Socket) => {
    if (client.destroyed) return
    connectPort(connection, p, { allowHalfOpen: true }).then(
      (remote) => {
        if (client.destroyed) return void remote.destroy()
        splice(client, remote)
        client.resume()
      },
      (error: SandboxError) => {
        forward.emit('connectionError', error)
        client.resetAndDestroy()
      },
    )
  }
  return forward
}

/** Carries bytes both ways; an end passes as an end, a failure of either side destroys the other. */
function splice(client: net.Socket, remote: PortSocket): void {
  client.pipe(remote)
  remote.pipe(client)
  finished(client, (err) => {
    if (err) remote.destroy()
  })
  finished(remote, (err) => {
    if (err && !client.destroyed) client.resetAndDestroy()
  })
}
