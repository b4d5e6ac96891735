/**
 * Host side of one agent connection: handshake, stream-id allocation, dispatch, flow control,
 * deadlines. Every frame from the agent is validated, its JSON fields against the contract
 * (validate.ts). A bad frame fails the one request whose
 * stream it names (S203 over the cap, S204 anything else malformed or unexpected) and cancels
 * that stream; frames on no open stream are dropped. The connection itself only ends when its
 * socket does, so one bad answer never poisons the calls around it. Nothing here throws into
 * the host process: every failure is a rejection of a call someone holds.
 */
import { EventEmitter } from 'node:events'
import net from 'node:net'
import { SandboxError } from '../errors.js'
import {
  PROTOCOL_VERSION,
  PROTOCOL_VERSIONS,
  WINDOWS,
  MESSAGES,
  type HelloRequest,
  type HelloResponse,
  type OpEvent,
  type OpName,
  type OpRequest,
  type OpResponse,
} from './contract.gen.js'
import {
  decodeJson,
  encodeFrame,
  encodeHeader,
  encodeWindow,
  FLAG_END,
  Frame,
  FrameDecoder,
  FrameError,
  FrameType,
  MAX_PAYLOAD,
  OutputChunkFrame,
} from './frame.js'
import { readAgentFrame } from './agent-frame.js'
import { checkControlEvent, checkHelloResponse, checksFor, type OpChecks } from './validate.js'
import { errors } from './errors.gen.js'

export { PROTOCOL_VERSION }
/** Default agent→host credit per stream; the host re-grants as it consumes. */
export const DEFAULT_WINDOW = WINDOWS.agentToHostDefault
const MIN_WINDOW = WINDOWS.agentToHostMin
const MAX_WINDOW = WINDOWS.agentToHostMax
const DATA_FRAME_BYTES = WINDOWS.dataFrameBytes
/** Host→agent DATA every stream may send before the agent's first WINDOW (PROTOCOL.md). */
export const IMPLICIT_SEND_CREDIT = WINDOWS.hostToAgentImplicit
/** How long a one-request-one-answer call waits for the agent unless told otherwise (ERRORS.md S200). */
export const DEFAULT_CALL_TIMEOUT_MS = 60_000
/** How long an aborted upload waits for the agent to confirm its cleanup before it rejects anyway. */
export const UPLOAD_ABORT_ANSWER_MS = 5_000

/** The agent's HELLO answer (the contract's hello.response). */
export type AgentHello = HelloResponse

export interface StreamHandlers<O extends OpName = OpName> {
  /** An EVENT of the op; one whose type the contract lists for it has been checked against its fields. */
  onEvent?(event: OpEvent<O>): void
  onOutput?(chunk: OutputChunkFrame): void
  onData?(data: Buffer): void
  /** When set, the caller calls stream.consumed(n) itself (slow consumers); otherwise credit is re-granted on delivery. */
  manualCredit?: boolean
}

export class AgentStream<O extends OpName = OpName> {
  readonly id: number
  /** The op's RESPONSE, checked against the contract. */
  readonly result: Promise<OpResponse<O>>
  #conn: AgentConnection
  #handlers: StreamHandlers<O>
  #resolve!: (v: OpResponse<O>) => void
  #reject!: (e: SandboxError) => void
  #sendCredit = IMPLICIT_SEND_CREDIT
  #creditWaiters: Array<() => void> = []
  #unacked = 0
  #window: number
  /** What the agent may still send before our next grant; it is never allowed below 0. */
  #agentCredit: number
  #done = false
  /** Set by abortUpload: the CANCEL is sent and the agent's answer awaited. */
  #aborting: SandboxError | null = null
  /** The contract's checks of this op's answers. */
  #checks: OpChecks<O>

  constructor(conn: AgentConnection, id: number, handlers: StreamHandlers<O>, window: number, checks: OpChecks<O>) {
    this.#conn = conn
    this.id = id
    this.#handlers = handlers
    this.#checks = checks
    this.#window = window
    this.#agentCredit = window
    this.result = new Promise((resolve, reject) => {
      this.#resolve = resolve
      this.#reject = reject
    })
    // A caller that only streams may never look at result; don't let that become an unhandled rejection.
    this.result.catch(() => {})
  }

  get done(): boolean {
    return this.#done
  }

  /** Sends bytes to the agent (upload, stdin), splitting into frames and waiting for credit. */
  async sendData(data: Buffer): Promise<void> {
    for (let off = 0; off < data.length;) {
      if (this.#aborting) throw this.#aborting
      if (this.#done)
        throw this.#conn.closedError ?? errors.aborted({ subject: `stream ${this.id}`, problem: 'already finished' })
      if (this.#sendCredit === 0) {
        await new Promise<void>((resolve) => this.#creditWaiters.push(resolve))
        continue
      }
      const n = Math.min(data.length - off, this.#sendCredit, DATA_FRAME_BYTES)
      this.#sendCredit -= n
      await this.#conn.write(this.id, FrameType.DATA, 0, data.subarray(off, off + n))
      off += n
    }
  }

  async endData(): Promise<void> {
    if (!this.#done && !this.#aborting) await this.#conn.write(this.id, FrameType.DATA, FLAG_END)
  }

  /**
   * Cancels an upload, but settles only when the agent has answered the CANCEL, which it does
   * after removing what the upload wrote, or after UPLOAD_ABORT_ANSWER_MS without an answer:
   * a caller who sees the rejection can rely on nothing being left behind. The result rejects
   * with reason, or resolves if the agent finished the upload before the CANCEL reached it.
   */
  abortUpload(reason: SandboxError): void {
    if (this.#done || this.#aborting) return
    this.#aborting = reason
    void this.#conn.write(this.id, FrameType.CANCEL, 0).catch(() => {})
    const timer = setTimeout(() => this.fail(reason), UPLOAD_ABORT_ANSWER_MS)
    const clear = () => clearTimeout(timer)
    this.result.then(clear, clear)
    this.#wakeSenders()
  }

  /** Abandons the stream: the agent stops work on it; result rejects with S206. */
  cancel(reason?: SandboxError): void {
    if (this.#done) return
    this.#conn.forget(this.id)
    void this.#conn.write(this.id, FrameType.CANCEL, 0).catch(() => {})
    this.fail(reason ?? errors.aborted({ subject: `request on stream ${this.id}`, problem: 'was cancelled' }))
  }

  /** Re-grants credit for n consumed bytes (manualCredit streams). */
  consumed(n: number): void {
    this.#unacked += n
    if (this.#unacked >= this.#window / 2 && !this.#done) {
      const grant = this.#unacked
      this.#unacked = 0
      this.#agentCredit += grant
      void this.#conn.write(this.id, FrameType.WINDOW, 0, encodeWindow(grant)).catch(() => {})
    }
  }

  /** @internal Throws (FrameError, or SandboxError from a handler) when the frame is not acceptable here. */
  deliver(frame: Frame): void {
    const got = readAgentFrame(frame, this.#checks)
    switch (got.kind) {
      case 'response':
      case 'error':
        this.#done = true
        this.#conn.forget(this.id)
        if (got.kind === 'response') this.#resolve(got.body)
        // S218 is the agent's answer to our CANCEL; the caller's reason says why better.
        else this.#reject(this.#aborting && got.body.code === 'S218' ? this.#aborting : errorFromAgent(got.body))
        this.#wakeSenders()
        return
      case 'event':
        // A type the contract lists for the op was checked against its fields; handlers tell
        // types apart by `type`, so one a newer agent adds is passed on and left alone.
        this.#handlers.onEvent?.(got.event as OpEvent<O>)
        return
      case 'output': {
        const { chunk } = got
        if (!this.#handlers.onOutput)
          throw new FrameError(
            'S204',
            MESSAGES.badFrame({ subject: `OUTPUT on stream ${this.id}`, problem: 'is unexpected' }),
          )
        this.#spendAgentCredit(chunk.data.length)
        this.#handlers.onOutput(chunk)
        // OUTPUT credit counts data bytes only, not the 17-byte chunk header (PROTOCOL.md).
        if (!this.#handlers.manualCredit) this.consumed(chunk.data.length)
        return
      }
      case 'data':
        if (!this.#handlers.onData)
          throw new FrameError(
            'S204',
            MESSAGES.badFrame({ subject: `DATA on stream ${this.id}`, problem: 'is unexpected' }),
          )
        this.#spendAgentCredit(got.data.length)
        this.#handlers.onData(got.data)
        if (!this.#handlers.manualCredit) this.consumed(got.data.length)
        return
      case 'window':
        this.#sendCredit += got.bytes
        this.#wakeSenders()
        return
    }
  }

  /**
   * An agent that sends past its window would make the host buffer without bound. A chunk of no
   * bytes costs no credit, so an agent could send them for ever (each one queued by a slow
   * logs() reader): the agent never sends one, and one is refused.
   */
  #spendAgentCredit(n: number): void {
    if (n === 0)
      throw new FrameError(
        'S204',
        MESSAGES.badFrame({
          subject: `stream ${this.id}`,
          problem: 'got a DATA or OUTPUT frame of no bytes (it would cost no credit)',
        }),
      )
    this.#agentCredit -= n
    if (this.#agentCredit < 0)
      throw new FrameError(
        'S204',
        MESSAGES.badFrame({
          subject: `stream ${this.id}`,
          problem: `got ${-this.#agentCredit} bytes past the window from the agent`,
        }),
      )
  }

  /** @internal */
  fail(error: SandboxError): void {
    if (this.#done) return
    this.#done = true
    this.#conn.forget(this.id)
    this.#reject(error)
    this.#wakeSenders()
  }

  #wakeSenders(): void {
    const waiters = this.#creditWaiters
    this.#creditWaiters = []
    for (const w of waiters) w()
  }
}

/** Turns an ERROR frame body into a SandboxError; unknown codes become S500 (still never thrown raw). */
export function errorFromAgent(body: Record<string, unknown>): SandboxError {
  const message = typeof body.message === 'string' ? body.message.slice(0, 4096) : 'agent error without a message'
  const details: Record<string, unknown> = {}
  if (typeof body.path === 'string') details.path = body.path
  if (typeof body.errno === 'string') details.errno = body.errno
  return SandboxError.fromCode(body.code, message, { details })
}

export interface ConnectOptions {
  token?: string
  timeoutMs?: number
  client?: string
}

interface AgentConnectionEvents {
  closed: [error: SandboxError | null]
  event: [event: Record<string, unknown>]
}

/**
 * The read buffer of every agent connection in this thread. Reads go straight into it
 * (net's onread), 1 MiB at a time instead of libuv's 64 KiB, and the decoder copies out
 * what it keeps before the callback returns; callbacks run one at a time on the event
 * loop, so one buffer serves all connections without a read overwriting live bytes.
 */
const READ_BUFFER = Buffer.allocUnsafeSlow(1024 * 1024)

/** Where a connection's bytes go: the handshake first, then the connection itself. */
interface ReadSink {
  push: (chunk: Buffer) => void
}

export class AgentConnection extends EventEmitter<AgentConnectionEvents> {
  readonly hello: AgentHello
  #socket: net.Socket
  #decoder = new FrameDecoder({ transientChunks: true })
  /** The open streams, by id: what the connection does with any of them, whatever its op. */
  #streams = new Map<number, Pick<AgentStream, 'deliver' | 'fail' | 'cancel'>>()
  #nextId = 1
  /** Writers waiting for the socket to drain; released by 'drain' or by close(). */
  #drainWaiters: Array<() => void> = []
  #closedError: SandboxError | null = null
  #closed = false
  #pings = new Map<string, () => void>()

  private constructor(socket: net.Socket, sink: ReadSink, hello: AgentHello, leftover: Buffer[]) {
    super()
    this.#socket = socket
    this.hello = hello
    sink.push = (chunk) => this.#onBytes(chunk)
    socket.on('error', (err) =>
      this.close(
        errors.connectionLost(
          { subject: 'connection to sandbox agent', problem: `failed: ${err.message}` },
          { cause: err },
        ),
      ),
    )
    socket.on('close', () => {
      const midFrame = this.#decoder.pending > 0 ? ' in the middle of a frame' : ''
      this.close(
        errors.connectionLost({
          subject: 'connection to the sandbox agent',
          problem: `was lost${midFrame} (the sandbox process exited or closed it)`,
        }),
      )
    })
    socket.on('drain', () => this.#releaseWriters())
    for (const chunk of leftover) this.#onBytes(chunk)
  }

  get closedError(): SandboxError | null {
    return this.#closedError
  }

  get isClosed(): boolean {
    return this.#closed
  }

  get activeStreams(): number {
    return this.#streams.size
  }

  /** Connects to an agent socket and completes the version handshake. */
  static connect(socketPath: string, options: ConnectOptions = {}): Promise<AgentConnection> {
    const timeoutMs = options.timeoutMs ?? 10_000
    return new Promise((resolve, reject) => {
      const sink: ReadSink = { push: (chunk) => onData(chunk) }
      const socket = net.createConnection({
        path: socketPath,
        onread: {
          buffer: READ_BUFFER,
          callback: (n: number, buf: Uint8Array) => (sink.push(buf.subarray(0, n) as Buffer), true),
        },
      })
      const decoder = new FrameDecoder({ transientChunks: true })
      const leftover: Buffer[] = []
      let settled = false
      const finish = (err: SandboxError | null, conn?: AgentConnection) => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        if (err) {
          sink.push = () => {}
          socket.destroy()
          reject(err)
        } else resolve(conn!)
      }
      const timer = setTimeout(
        () =>
          finish(
            errors.handshakeTimeout({
              subject: `agent at ${socketPath}`,
              problem: `did not answer the handshake within ${timeoutMs} ms`,
            }),
          ),
        timeoutMs,
      )
      const onData = (chunk: Buffer) => {
        let frames: Frame[]
        try {
          frames = decoder.push(chunk)
        } catch (e) {
          const fe = e as FrameError
          return finish(new SandboxError(fe.code, `handshake: ${fe.message}`))
        }
        if (frames.length === 0) return
        const [first, ...rest] = frames
        try {
          if (first.stream !== 0)
            throw new FrameError(
              'S204',
              MESSAGES.badFrame({ subject: 'handshake answer', problem: `is on stream ${first.stream}, expected 0` }),
            )
          const body = decodeJson(first.payload, first.type === FrameType.HELLO ? 'HELLO' : 'ERROR')
          if (first.type === FrameType.ERROR) return finish(errorFromAgent(body))
          if (first.type !== FrameType.HELLO)
            throw new FrameError(
              'S204',
              MESSAGES.badFrame({ subject: 'handshake answer', problem: `has type 0x${first.type.toString(16)}` }),
            )
          const hello = validateHello(body)
          // Frames that arrived in the same chunk after HELLO are replayed into the connection.
          for (const f of rest) leftover.push(encodeFrame(f.stream, f.type, f.flags, f.payload))
          if (decoder.pending > 0)
            throw new FrameError(
              'S204',
              MESSAGES.badFrame({ subject: 'bytes after the handshake', problem: 'are unexpected' }),
            )
          finish(null, new AgentConnection(socket, sink, hello, leftover))
        } catch (e) {
          if (e instanceof SandboxError) return finish(e)
          const fe = e as FrameError
          finish(new SandboxError(fe.code ?? 'S204', `handshake: ${fe.message}`))
        }
      }
      socket.once('error', (err: NodeJS.ErrnoException) => {
        // The same words under either code: the socket and why it refused.
        const refusal = err.code === 'EACCES' ? errors.accessDenied : errors.connectionLost
        finish(
          refusal(
            { subject: `sandbox agent at ${socketPath}`, problem: `refused the connection: ${err.message}` },
            { cause: err },
          ),
        )
      })
      socket.once('close', () =>
        finish(
          errors.connectionLost({
            subject: `sandbox agent at ${socketPath}`,
            problem: 'closed the connection during the handshake',
          }),
        ),
      )
      socket.once('connect', () => {
        // The versions this host speaks; min/max for agents that predate the list.
        const hello: HelloRequest = {
          versions: [...PROTOCOL_VERSIONS],
          versionMin: Math.min(...PROTOCOL_VERSIONS),
          versionMax: Math.max(...PROTOCOL_VERSIONS),
          client: options.client ?? 'krunbox',
        }
        if (options.token !== undefined) hello.token = options.token
        socket.write(encodeFrame(0, FrameType.HELLO, 0, Buffer.from(JSON.stringify(hello))))
      })
    })
  }

  /** Opens a request stream for op with its request as the contract states it. */
  request<O extends OpName>(op: O, args: OpRequest<O>, handlers: StreamHandlers<O> = {}): AgentStream<O> {
    const checks = checksFor(op)
    if (this.#closed) {
      const s = new AgentStream(this, 0, handlers, DEFAULT_WINDOW, checks)
      s.fail(
        this.#closedError ??
          errors.connectionLost({ subject: 'connection to the sandbox agent', problem: 'is closed' }),
      )
      return s
    }
    const id = this.#nextId
    this.#nextId += 2
    // The agent clamps the same way (PROTOCOL.md), so both sides count the same credit.
    const askedWindow: unknown = Reflect.get(args, 'window')
    const asked = typeof askedWindow === 'number' ? askedWindow : DEFAULT_WINDOW
    const window = Math.min(MAX_WINDOW, Math.max(MIN_WINDOW, asked))
    const stream = new AgentStream(this, id, handlers, window, checks)
    this.#streams.set(id, stream)
    const payload = Buffer.from(JSON.stringify({ op, ...args }))
    if (payload.length > MAX_PAYLOAD) {
      this.#streams.delete(id)
      stream.fail(
        errors.badArgument({ subject: `request ${op}`, problem: `is larger than the ${MAX_PAYLOAD}-byte frame cap` }),
      )
      return stream
    }
    void this.write(id, FrameType.REQUEST, 0, payload).catch(() => {})
    return stream
  }

  /**
   * One request, one JSON answer, within a deadline (default DEFAULT_CALL_TIMEOUT_MS): an agent
   * that stops answering makes the call reject with S200 and its stream is cancelled.
   */
  call<O extends OpName>(op: O, args: OpRequest<O>, options: { timeoutMs?: number } = {}): Promise<OpResponse<O>> {
    const stream = this.request(op, args)
    const timeoutMs = options.timeoutMs ?? DEFAULT_CALL_TIMEOUT_MS
    const timer = setTimeout(
      () =>
        stream.cancel(
          errors.timedOut({ subject: `${op}: the sandbox agent`, problem: `did not answer within ${timeoutMs} ms` }),
        ),
      timeoutMs,
    )
    const clear = () => clearTimeout(timer)
    stream.result.then(clear, clear)
    return stream.result
  }

  /** Resolves when the agent answers a PING; rejects with S200 after timeoutMs. */
  ping(timeoutMs = DEFAULT_CALL_TIMEOUT_MS): Promise<void> {
    const nonce = Math.random().toString(36).slice(2)
    return new Promise((resolve, reject) => {
      if (this.#closed) return reject(this.#closedError)
      const timer = setTimeout(() => {
        this.#pings.delete(nonce)
        reject(
          errors.timedOut({ subject: 'the sandbox agent', problem: `did not answer a ping within ${timeoutMs} ms` }),
        )
      }, timeoutMs)
      this.#pings.set(nonce, () => {
        clearTimeout(timer)
        resolve()
      })
      void this.write(0, FrameType.PING, 0, Buffer.from(nonce)).catch((err) => {
        clearTimeout(timer)
        this.#pings.delete(nonce)
        reject(err)
      })
    })
  }

  /** @internal */
  write(
    stream: number,
    type: (typeof FrameType)[keyof typeof FrameType],
    flags: number,
    payload?: Buffer,
  ): Promise<void> {
    if (this.#closed) return Promise.reject(this.#closedError)
    const header = encodeHeader(stream, type, flags, payload?.length ?? 0)
    let ok: boolean
    if (payload && payload.length > 0) {
      // Header and payload go out together (one writev) without copying the payload.
      this.#socket.cork()
      this.#socket.write(header)
      ok = this.#socket.write(payload)
      this.#socket.uncork()
    } else ok = this.#socket.write(header)
    if (ok) return Promise.resolve()
    return new Promise((resolve) => this.#drainWaiters.push(resolve))
  }

  #releaseWriters(): void {
    const waiters = this.#drainWaiters
    this.#drainWaiters = []
    for (const w of waiters) w()
  }

  /** @internal The stream is finished: later frames naming it are dropped. */
  forget(id: number): void {
    this.#streams.delete(id)
  }

  close(error: SandboxError | null = null): void {
    if (this.#closed) return
    this.#closed = true
    this.#closedError =
      error ??
      errors.sandboxStopped({ sandboxId: this.hello.sandboxId, state: 'has no agent connection: the host closed it' })
    this.#socket.destroy()
    for (const s of [...this.#streams.values()]) s.fail(this.#closedError)
    this.#streams.clear()
    for (const resolve of this.#pings.values()) resolve()
    this.#pings.clear()
    this.#releaseWriters()
    this.emit('closed', error)
  }

  #onBytes(chunk: Buffer): void {
    for (const frame of this.#decoder.push(chunk)) {
      if (this.#closed) return
      if (frame.stream === 0) this.#control(frame)
      else this.#toStream(frame)
    }
  }

  /** Stream 0 carries only sandbox EVENTs and PONGs; anything else there is dropped. */
  #control(frame: Frame): void {
    if (frame.oversized !== undefined) return
    if (frame.type === FrameType.EVENT) {
      let event: Record<string, unknown>
      try {
        event = decodeJson(frame.payload, 'EVENT')
        checkControlEvent(event)
      } catch {
        return
      }
      this.emit('event', event)
    } else if (frame.type === FrameType.PONG) {
      const nonce = frame.payload.toString('utf8')
      this.#pings.get(nonce)?.()
      this.#pings.delete(nonce)
    }
  }

  /**
   * A frame for a request stream. Frames naming no open stream (finished, cancelled, never
   * opened) are dropped: nobody waits for them. A frame the stream cannot accept fails that
   * one request and cancels its stream.
   */
  #toStream(frame: Frame): void {
    const stream = this.#streams.get(frame.stream)
    if (!stream) return
    try {
      stream.deliver(frame)
    } catch (e) {
      stream.cancel(protocolError(e, frame.stream))
    }
  }
}

/** What a bad frame on one stream becomes for the request that owns it. */
function protocolError(e: unknown, stream: number): SandboxError {
  if (e instanceof SandboxError) return e
  if (e instanceof FrameError)
    return new SandboxError(e.code, `agent sent a bad frame on stream ${stream}: ${e.message}`)
  return errors.internal(
    { context: `handling a frame of stream ${stream} failed`, reason: (e as Error)?.message ?? String(e) },
    { cause: e },
  )
}

/** The agent's HELLO: a version this host offered (else S201: an agent of another version), fields as the contract says. */
export function validateHello(body: Record<string, unknown>): AgentHello {
  const { version } = body
  if (Number.isSafeInteger(version) && !PROTOCOL_VERSIONS.includes(version as number)) {
    throw errors.versionRefused({ version, offered: PROTOCOL_VERSIONS.join(', ') })
  }
  checkHelloResponse(body)
  const { agent, sandboxId, pid, features } = body
  return { version: body.version, agent, sandboxId, pid, features }
}
