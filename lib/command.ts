/**
 * A command running in a sandbox: a typed event emitter for its ordered log chunks, a
 * promise for its result, resumable log iteration, paging, cancellation. The agent holds
 * the command and its log retention; this object follows it over the connection.
 */
import { EventEmitter, once } from 'node:events'
import fs from 'node:fs'
import { Readable, Writable } from 'node:stream'
import { finished } from 'node:stream/promises'
import { CommandSnapshot, CommandStatus, ENDED_STATUSES, parseSnapshot } from './command-snapshot.js'
import { SandboxError } from './errors.js'
import { hostPathError } from './host-path-error.js'
import { intInRange, oneOf, optionsObject, signalName } from './options.js'
import type { AgentConnection, AgentStream } from './protocol/client.js'
import { FrameError, type OutputChunkFrame } from './protocol/frame.js'
import {
  FOLLOW_WINDOW_BYTES,
  HEARTBEAT_MS,
  HOST_GRACE_MS,
  KILL_GRACE_MS,
  LOG_ITERATOR_WINDOW_BYTES,
  LOG_PAGE_CHUNKS,
} from './defaults.js'
import { assertInternal, INTERNAL } from './internal.js'
import { MESSAGES, type ExecReadResponse, type ExecStartRequest } from './protocol/contract.gen.js'
import { errors } from './protocol/errors.gen.js'

export type { CommandStatus, CommandSnapshot }
export type LogStream = 'stdout' | 'stderr'

/** What sandbox.start asks exec.start for; the command adds its id and how it follows the command. */
export type ExecStartArgs = Omit<ExecStartRequest, 'id' | 'follow' | 'stdin' | 'window'>
/** The streams following a command: its exec.start, or an exec.attach of one it adopted. */
type FollowStream = AgentStream<'exec.start'> | AgentStream<'exec.attach'>

export interface LogChunk {
  seq: number
  stream: LogStream
  data: Buffer
  timestamp: number
}

export interface CommandResult {
  exitCode: number | null
  signal: string | null
  status: CommandStatus
  timedOut: boolean
  durationMs: number
  stdoutTruncated: boolean
  stderrTruncated: boolean
  failReason: string | null
  killedReason: 'sandbox_destroyed' | null
  cancelMode: 'graceful' | 'force' | null
  canceledAt: number | null
  terminationSignal: string | null
  usage: CommandSnapshot['usage']
}

/** A 'heartbeat': the command was silent for heartbeatMs and its agent says it still runs. */
export interface CommandHeartbeat {
  /** When the agent's answer came (ms since the epoch). */
  timestamp: number
  status: CommandStatus
  /** The seq of the last chunk delivered to this object's listeners: no output since. */
  lastSeq: number
}

export interface CommandEvents {
  stdout: [data: Buffer]
  stderr: [data: Buffer]
  log: [chunk: LogChunk]
  /** While the command is silent, every heartbeatMs (start option, default 15 s) once the agent confirms it runs. */
  heartbeat: [beat: CommandHeartbeat]
  /**
   * The command timed out (S200, its failReason as the message), before 'exit'. Emitted only
   * to listeners: a command nobody listens to for 'error' never throws in the host.
   */
  error: [error: SandboxError]
  exit: [result: CommandResult]
}

/** What a Command needs from its sandbox. */
export interface CommandHost {
  connection(): AgentConnection
  commandEnded(command: Command): void
  /** True once this handle is stopping the sandbox: a command whose end went unreported died with it. */
  stopping(): boolean
}

/**
 * What a sandbox does to its commands and a caller must not. Exported from this module, never
 * from lib/index.ts, so no caller reaches it.
 */
export interface CommandControl {
  create(host: CommandHost, id: string, argv: string[]): Command
  /** Sends exec.start and follows the command; heartbeatMs: the silence after which a 'heartbeat' is sought (0: never). */
  begin(cmd: Command, request: ExecStartArgs, stdin: string | Buffer | Readable | undefined, heartbeatMs?: number): void
  /** Adopts an existing command (idempotency key hit, attach from another process). */
  adopt(cmd: Command, snapshot: CommandSnapshot, follow: boolean): void
  /**
   * The host gives up on the command (its agent stopped answering): wait() rejects with
   * `error` and the stream following it is cancelled. The agent, if alive, keeps its own record.
   */
  giveUp(cmd: Command, error: SandboxError): void
}
let control!: CommandControl

/** Which streams a logs request wants: one, or both interleaved in seq order ('combined', the default). */
function streamsOf(value: unknown): LogStream[] {
  const which = oneOf(value, 'stream', ['stdout', 'stderr', 'combined'] as const, 'combined')
  return which === 'combined' ? ['stdout', 'stderr'] : [which]
}

export function chunkFromFrame(frame: OutputChunkFrame): LogChunk {
  return { seq: frame.seq, stream: frame.fd === 1 ? 'stdout' : 'stderr', data: frame.data, timestamp: frame.timestamp }
}

export function resultFrom(s: CommandSnapshot): CommandResult {
  return {
    exitCode: s.exitCode,
    signal: s.signal,
    status: s.status,
    timedOut: s.timedOut,
    durationMs: s.durationMs ?? 0,
    stdoutTruncated: s.stdoutTruncated,
    stderrTruncated: s.stderrTruncated,
    failReason: s.failReason,
    killedReason: s.killedReason,
    cancelMode: s.cancelMode,
    canceledAt: s.canceledAt,
    terminationSignal: s.terminationSignal,
    usage: s.usage,
  }
}

export interface CancelOptions {
  /** `'graceful'` (default): SIGTERM to the process group, SIGKILL after killGraceMs; `'force'`: SIGKILL now. */
  mode?: 'graceful' | 'force'
  /** ms between SIGTERM and SIGKILL, the same option exec/start take. 0–60 000, default 2 000. */
  killGraceMs?: number
  /** @deprecated the old name of killGraceMs. */
  graceMs?: number
}

export class Command extends EventEmitter<CommandEvents> {
  readonly id: string
  readonly argv: string[]
  #host: CommandHost
  #snapshot: CommandSnapshot | null = null
  #status: CommandStatus = 'queued'
  #lastSeq = 0
  #result: Promise<CommandResult>
  #settle!: (r: CommandResult) => void
  #fail!: (e: SandboxError) => void
  #ended = false
  /** The stream following the command, while it does. */
  #stream: FollowStream | null = null
  /** Settles once the agent knows the command: requests about it must not overtake exec.start. */
  #known: Promise<void>
  #markKnown!: () => void
  #heartbeatMs: number = HEARTBEAT_MS.default
  /** The last output (or heartbeat): a heartbeat is due heartbeatMs after it. */
  #quietSince = Date.now()
  #heartbeatTimer: NodeJS.Timeout | null = null

  static {
    control = {
      create: (host, id, argv) => new this(INTERNAL, host, id, argv),
      begin: (cmd, request, stdin, heartbeatMs) => {
        cmd.#heartbeatMs = heartbeatMs ?? HEARTBEAT_MS.default
        cmd.#begin(request, stdin)
      },
      adopt: (cmd, snapshot, follow) => cmd.#adopt(snapshot, follow),
      giveUp: (cmd, error) => cmd.#giveUp(error),
    }
  }

  /** Use sandbox.start(), sandbox.exec() or sandbox.command(id). */
  private constructor(key: typeof INTERNAL, host: CommandHost, id: string, argv: string[]) {
    assertInternal(key, 'Command', 'sandbox.start(), sandbox.exec() or sandbox.command(id)')
    super()
    this.#host = host
    this.id = id
    this.argv = argv
    this.#result = new Promise((resolve, reject) => {
      this.#settle = resolve
      this.#fail = reject
    })
    this.#result.catch(() => {})
    this.#known = new Promise((resolve) => (this.#markKnown = resolve))
    // Heartbeats cost an exec.get each: they are sought only while someone listens for them.
    const untyped: EventEmitter = this
    untyped.on('newListener', (name: string | symbol) => {
      if (name === 'heartbeat') queueMicrotask(() => this.#armHeartbeat())
    })
  }

  get status(): CommandStatus {
    return this.#status
  }
  /** The latest state the agent reported (exit code, cancel details, truncation, usage). */
  get snapshot(): CommandSnapshot | null {
    return this.#snapshot
  }
  get killedReason(): 'sandbox_destroyed' | null {
    return this.#snapshot?.killedReason ?? null
  }
  get cancelMode() {
    return this.#snapshot?.cancelMode ?? null
  }
  get canceledAt() {
    return this.#snapshot?.canceledAt ?? null
  }
  get terminationSignal() {
    return this.#snapshot?.terminationSignal ?? null
  }
  /** Seq of the last chunk delivered to this object's listeners. */
  get lastSeq(): number {
    return this.#lastSeq
  }

  #begin(request: ExecStartArgs, stdin: string | Buffer | Readable | undefined): void {
    this.#status = 'starting'
    const stream = this.#host.connection().request(
      'exec.start',
      { ...request, id: this.id, follow: true, stdin: stdin !== undefined, window: FOLLOW_WINDOW_BYTES },
      {
        onEvent: (event) => {
          if (event.type === 'started') {
            this.#update(parseSnapshot(event.command))
            this.#markKnown()
          }
        },
        onOutput: (frame) => this.#deliver(chunkFromFrame(frame)),
      },
    )
    this.#stream = stream
    this.#settleFrom(stream)
    this.#armHeartbeat()
    if (stdin !== undefined) void this.#feed(stream, stdin)
  }

  /** The command ends with the stream's final snapshot; a malformed one is the agent's fault (S204). */
  #settleFrom<O extends 'exec.start' | 'exec.attach'>(stream: AgentStream<O>): void {
    stream.result.then(
      (body) => {
        try {
          this.#end(parseSnapshot(body.command))
        } catch (err) {
          this.#abandon(asProtocolError(err))
        }
      },
      (err: SandboxError) => this.#abandon(err),
    )
  }

  #giveUp(error: SandboxError): void {
    this.#abandon(error)
    this.#stream?.cancel(error)
  }

  #adopt(snapshot: CommandSnapshot, follow: boolean): void {
    this.#update(snapshot)
    this.#markKnown()
    if (ENDED_STATUSES.has(snapshot.status)) return this.#end(snapshot)
    if (!follow) return
    const stream = this.#host.connection().request(
      'exec.attach',
      {
        commandId: this.id,
        afterSeq: snapshot.nextSeq - 1,
        streams: ['stdout', 'stderr'],
        follow: true,
        window: FOLLOW_WINDOW_BYTES,
      },
      { onOutput: (frame) => this.#deliver(chunkFromFrame(frame)) },
    )
    this.#stream = stream
    this.#settleFrom(stream)
    this.#armHeartbeat()
  }

  /** Resolves once the agent has accepted the command (it is running, or already ended or failed). */
  started(): Promise<void> {
    return this.#known
  }

  /** Resolves with the result when the command ends (a non-zero exit, timeout or signal is a result). */
  wait(): Promise<CommandResult> {
    return this.#result
  }

  /** Stops the command: graceful = SIGTERM to its process group, SIGKILL after graceMs; force = SIGKILL now. */
  async cancel(options?: CancelOptions): Promise<CommandSnapshot> {
    const o = optionsObject(options, 'cancel options', ['mode', 'killGraceMs', 'graceMs'])
    const mode = oneOf(o.mode, 'mode', ['graceful', 'force'] as const, 'graceful')
    if (o.killGraceMs !== undefined && o.graceMs !== undefined)
      throw errors.badArgument({
        subject: 'cancel options',
        problem: 'take killGraceMs or its old name graceMs, not both',
      })
    const graceMs =
      o.killGraceMs !== undefined
        ? intInRange(o.killGraceMs, 'killGraceMs', KILL_GRACE_MS.min, KILL_GRACE_MS.max)
        : intInRange(o.graceMs, 'graceMs', KILL_GRACE_MS.min, KILL_GRACE_MS.max, KILL_GRACE_MS.default)
    await this.#known
    if (this.#ended && this.#snapshot) return this.#snapshot
    // The agent answers once the command has ended, at most grace + 1 s later (PROTOCOL.md).
    const timeoutMs = (mode === 'graceful' ? graceMs : 0) + 1_000 + HOST_GRACE_MS
    const body = await this.#host.connection().call('exec.cancel', { commandId: this.id, mode, graceMs }, { timeoutMs })
    const snap = checked(() => parseSnapshot(body.command))
    checked(() => this.#update(snap))
    return snap
  }

  /** `await using cmd = sb.start(...)`: a command still running when the scope ends is cancelled (graceful). */
  async [Symbol.asyncDispose](): Promise<void> {
    if (this.#ended) return
    await this.cancel().catch(() => {})
  }

  /** Sends a signal to the command's process group. */
  async kill(signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
    signalName(signal, 'signal')
    await this.#known
    if (this.#ended) return
    await this.#host.connection().call('exec.signal', { commandId: this.id, signal })
  }

  /**
   * Changes the window of a command started with a terminal (`pty`); its foreground process
   * group gets SIGWINCH. A no-op once the command has ended; S001 for a command without one.
   */
  async resize(cols: number, rows: number): Promise<void> {
    cols = intInRange(cols, 'cols', 1, 4096)
    rows = intInRange(rows, 'rows', 1, 4096)
    await this.#known
    if (this.#ended) return
    await this.#host.connection().call('exec.resize', { commandId: this.id, cols, rows })
  }

  /**
   * Replays retained chunks after afterSeq, then follows live ones; ends when the command ends.
   * Credit is granted as the consumer pulls, so a slow consumer slows the command, not memory.
   */
  async *logs(options?: { afterSeq?: number; stream?: LogStream | 'combined' }): AsyncGenerator<LogChunk> {
    const o = optionsObject(options, 'logs options', ['afterSeq', 'stream'])
    const afterSeq = intInRange(o.afterSeq, 'afterSeq', 0, Number.MAX_SAFE_INTEGER, 0)
    const streams = streamsOf(o.stream)
    const queue: Array<{ chunk: LogChunk; bytes: number }> = []
    let wake: (() => void) | null = null
    let finishedOk = false
    let error: SandboxError | null = null
    await this.#known
    const stream = this.#host.connection().request(
      'exec.attach',
      { commandId: this.id, afterSeq, streams, follow: true, window: LOG_ITERATOR_WINDOW_BYTES },
      {
        manualCredit: true,
        onOutput: (frame) => {
          queue.push({ chunk: chunkFromFrame(frame), bytes: frame.data.length })
          wake?.()
        },
      },
    )
    stream.result
      .then(
        () => (finishedOk = true),
        (e: SandboxError) => (error = e),
      )
      .finally(() => wake?.())
    try {
      for (;;) {
        const next = queue.shift()
        if (next) {
          stream.consumed(next.bytes)
          yield next.chunk
          continue
        }
        if (error) throw error
        if (finishedOk) return
        await new Promise<void>((resolve) => {
          wake = resolve
        })
        wake = null
      }
    } finally {
      if (!stream.done) stream.cancel()
    }
  }

  /** One page of retained chunks: at most `limit` (1..100, default 50) after `afterSeq`. */
  async readLogs(options?: {
    stream?: LogStream | 'combined'
    afterSeq?: number
    limit?: number
  }): Promise<{ data: LogChunk[]; hasMore: boolean; nextSeq: number }> {
    const o = optionsObject(options, 'readLogs options', ['stream', 'afterSeq', 'limit'])
    const afterSeq = intInRange(o.afterSeq, 'afterSeq', 0, Number.MAX_SAFE_INTEGER, 0)
    const limit = intInRange(o.limit, 'limit', LOG_PAGE_CHUNKS.min, LOG_PAGE_CHUNKS.max, LOG_PAGE_CHUNKS.default)
    const streams = streamsOf(o.stream)
    await this.#known
    const body = await this.#host.connection().call('exec.read', { commandId: this.id, afterSeq, streams, limit })
    return checked(() => parseLogPage(body, afterSeq, limit))
  }

  /**
   * Writes the complete log of one stream to a file path or a writable stream. A path that cannot
   * be written is S211/S212/S215 naming it; a Writable that fails is S210 (and is not destroyed).
   */
  async downloadLogs(stream: LogStream, destination: string | Writable): Promise<{ bytes: number }> {
    const which = oneOf(stream, 'stream', ['stdout', 'stderr'] as const, 'stdout')
    if (typeof destination !== 'string' && !(destination instanceof Writable)) {
      throw errors.badArgument({
        subject: 'destination',
        problem: `must be a file path or a Writable stream, got ${typeof destination}`,
      })
    }
    const owned = typeof destination === 'string'
    const out = owned ? fs.createWriteStream(destination) : destination
    // Until the end, the destination's 'error' is ours to report: unheard, it would be an
    // uncaught exception in the host.
    let failure: unknown = null
    const onError = (err: unknown) => (failure ??= err)
    out.on('error', onError)
    let bytes = 0
    try {
      if (owned) await once(out, 'open').catch(() => {})
      if (!failure) {
        for await (const chunk of this.logs({ stream: which, afterSeq: 0 })) {
          bytes += chunk.data.length
          if (!out.write(chunk.data)) await once(out, 'drain').catch(() => {})
          if (failure) break
        }
      }
      if (owned && !failure) {
        out.end()
        await finished(out).catch(() => {})
      }
    } finally {
      if (owned) out.destroy()
      else out.off('error', onError)
    }
    if (failure === null) return { bytes }
    if (owned) throw hostPathError(failure, destination)
    throw errors.fsBadRequest(
      { path: 'destination', reason: `the Writable failed: ${(failure as Error)?.message ?? String(failure)}` },
      { cause: failure },
    )
  }

  #update(s: CommandSnapshot): void {
    if (s.id !== this.id)
      throw errors.badFrame({
        subject: `the agent's report of command ${s.id.slice(0, 128)}`,
        problem: `came on the stream of ${this.id}`,
      })
    this.#snapshot = s
    this.#status = s.status
  }

  #deliver(chunk: LogChunk): void {
    if (chunk.seq <= this.#lastSeq)
      throw errors.badFrame({
        subject: `command ${this.id}: chunk seq ${chunk.seq}`,
        problem: `does not follow ${this.#lastSeq}`,
      })
    this.#lastSeq = chunk.seq
    if (this.#heartbeatTimer) this.#quietSince = Date.now()
    if (this.#status === 'starting' || this.#status === 'queued') this.#status = 'running'
    this.emit(chunk.stream, chunk.data)
    this.emit('log', chunk)
  }

  #end(s: CommandSnapshot): void {
    this.#markKnown()
    if (this.#ended) return
    this.#update(s)
    if (!ENDED_STATUSES.has(s.status))
      return this.#abandon(
        errors.badFrame({ subject: `command ${this.id}`, problem: `was ended by the agent in status ${s.status}` }),
      )
    this.#ended = true
    this.#stream = null
    this.#stopHeartbeat()
    const result = resultFrom(s)
    this.#host.commandEnded(this)
    this.#settle(result)
    if (s.status === 'timed_out' && this.listenerCount('error') > 0) {
      this.emit(
        'error',
        errors.timedOut({ subject: `command ${this.id} (${this.argv[0]})`, problem: result.failReason ?? 'timed out' }),
      )
    }
    this.emit('exit', result)
  }

  /**
   * While this object follows the command and someone listens for 'heartbeat': once the command
   * has been silent for heartbeatMs, the agent is asked about it (exec.get), and a 'still
   * running' answer is a heartbeat. A dead agent gives none (and the stream's end says why).
   */
  #armHeartbeat(): void {
    if (
      this.#heartbeatTimer ||
      this.#ended ||
      this.#stream === null ||
      this.#heartbeatMs === 0 ||
      this.listenerCount('heartbeat') === 0
    )
      return
    this.#quietSince = Date.now()
    this.#scheduleBeat()
  }

  #scheduleBeat(): void {
    const wait = Math.max(0, this.#quietSince + this.#heartbeatMs - Date.now())
    this.#heartbeatTimer = setTimeout(() => void this.#beat(), wait)
    this.#heartbeatTimer.unref()
  }

  async #beat(): Promise<void> {
    if (this.#ended || this.listenerCount('heartbeat') === 0) return this.#stopHeartbeat()
    if (Date.now() - this.#quietSince >= this.#heartbeatMs && !this.#host.stopping()) {
      try {
        const body = await this.#host.connection().call('exec.get', { commandId: this.id })
        const snap = parseSnapshot(body.command)
        if (!this.#ended && snap.id === this.id && !ENDED_STATUSES.has(snap.status)) {
          this.emit('heartbeat', { timestamp: Date.now(), status: snap.status, lastSeq: this.#lastSeq })
        }
      } catch {
        // No answer is no heartbeat; the stream following the command reports what broke.
      }
      this.#quietSince = Date.now()
    }
    if (this.#ended || this.#heartbeatTimer === null) return
    this.#scheduleBeat()
  }

  #stopHeartbeat(): void {
    if (this.#heartbeatTimer) clearTimeout(this.#heartbeatTimer)
    this.#heartbeatTimer = null
  }

  #abandon(err: SandboxError): void {
    this.#markKnown()
    if (this.#ended) return
    // Stopping the sandbox kills every command in it: when the agent's last word on this one
    // was lost with the connection (or it refused the start because it was shutting down),
    // that is still the command's fate.
    if (this.#host.stopping() && err.code !== 'S204' && err.code !== 'S203')
      return this.#end(killedBySandboxEnd(this.id, this.argv, this.#snapshot))
    this.#ended = true
    this.#stream = null
    this.#stopHeartbeat()
    this.#host.commandEnded(this)
    this.#fail(err)
  }

  async #feed(stream: AgentStream<'exec.start'>, stdin: string | Buffer | Readable): Promise<void> {
    try {
      if (stdin instanceof Readable) {
        for await (const piece of stdin) {
          await stream.sendData(Buffer.isBuffer(piece) ? piece : Buffer.from(piece))
        }
      } else {
        await stream.sendData(Buffer.isBuffer(stdin) ? stdin : Buffer.from(stdin))
      }
      await stream.endData()
    } catch (err) {
      // The command ended or the connection died: its result says so. A SandboxError from the
      // caller's stream (another sandbox's file, say) is the source failing like any other.
      if (stream.done || this.#ended) return
      // The caller's stdin stream failed: the command would wait for the rest until its timeout.
      const failure = errors.stdinFailed(
        { commandId: this.id, reason: (err as Error)?.message ?? String(err) },
        { cause: err },
      )
      // The cancel must not overtake exec.start (abandoning marks the command known at once).
      await this.#known
      if (this.#ended) return
      this.#abandon(failure)
      await this.#host
        .connection()
        .call('exec.cancel', { commandId: this.id, mode: 'force', graceMs: 0 })
        .catch(() => {})
      stream.cancel(failure)
    }
  }
}

/** A FrameError (or anything unexpected) thrown while reading an answer, as the caller's S204. */
function asProtocolError(err: unknown): SandboxError {
  if (err instanceof SandboxError) return err
  if (err instanceof FrameError) return new SandboxError(err.code, `agent sent a malformed answer: ${err.message}`)
  return errors.badFrame(
    { subject: 'an answer of the agent', problem: `is malformed: ${(err as Error)?.message ?? String(err)}` },
    { cause: err },
  )
}

function checked<T>(read: () => T): T {
  try {
    return read()
  } catch (err) {
    throw asProtocolError(err)
  }
}

/** The final state of a command that was live when its sandbox was stopped and whose end the agent could not report. */
function killedBySandboxEnd(id: string, argv: string[], last: CommandSnapshot | null): CommandSnapshot {
  const now = Date.now()
  const startedAt = last?.startedAt ?? null
  return {
    id,
    argv,
    status: 'killed',
    pid: last?.pid ?? null,
    exitCode: null,
    signal: last?.pid ? 'SIGKILL' : null,
    timedOut: false,
    timeoutMs: last?.timeoutMs ?? null,
    startedAt,
    endedAt: now,
    durationMs: startedAt === null ? 0 : Math.max(0, now - startedAt),
    cancelMode: last?.cancelMode ?? null,
    canceledAt: last?.canceledAt ?? null,
    terminationSignal: last?.pid ? 'SIGKILL' : null,
    killedReason: 'sandbox_destroyed',
    failReason: null,
    stdoutTruncated: last?.stdoutTruncated ?? false,
    stderrTruncated: last?.stderrTruncated ?? false,
    firstSeq: last?.firstSeq ?? 0,
    nextSeq: last?.nextSeq ?? 0,
    usage: null,
  }
}

/** An exec.read page, checked: seqs increase past afterSeq, at most limit chunks, data is base64. */
function parseLogPage(
  body: ExecReadResponse,
  afterSeq: number,
  limit: number,
): { data: LogChunk[]; hasMore: boolean; nextSeq: number } {
  if (!Array.isArray(body.chunks) || body.chunks.length > limit)
    throw new FrameError(
      'S204',
      MESSAGES.badFrame({ subject: 'exec.read answer', problem: 'lacks a chunks array of at most limit entries' }),
    )
  let last = afterSeq
  const data: LogChunk[] = body.chunks.map((c: unknown) => {
    const o = (typeof c === 'object' && c !== null ? c : {}) as Record<string, unknown>
    const seq = o.seq
    if (typeof seq !== 'number' || !Number.isSafeInteger(seq) || seq <= last)
      throw new FrameError(
        'S204',
        MESSAGES.badFrame({
          subject: `exec.read chunk seq ${String(seq).slice(0, 40)}`,
          problem: `does not follow ${last}`,
        }),
      )
    last = seq
    if (typeof o.data !== 'string' || (o.stream !== 'stdout' && o.stream !== 'stderr'))
      throw new FrameError(
        'S204',
        MESSAGES.badFrame({ subject: `exec.read chunk ${seq}`, problem: 'lacks data or stream' }),
      )
    return {
      seq,
      stream: o.stream,
      timestamp: typeof o.timestamp === 'number' ? o.timestamp : 0,
      data: Buffer.from(o.data, 'base64'),
    }
  })
  const nextSeq = body.nextSeq
  if (typeof nextSeq !== 'number' || !Number.isSafeInteger(nextSeq) || nextSeq < last)
    throw new FrameError(
      'S204',
      MESSAGES.badFrame({
        subject: `exec.read nextSeq ${String(nextSeq).slice(0, 40)}`,
        problem: `is not a cursor at or after ${last}`,
      }),
    )
  return { data, hasMore: body.hasMore === true, nextSeq }
}

export { control as commandControl }
