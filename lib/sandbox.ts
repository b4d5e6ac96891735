/**
 * A sandbox handle: commands, filesystem, pause/resume, stop, and the lifecycle events.
 * Created through Runtime (Sandbox.create uses a default one) or attached from another process.
 */
import { createHash, randomUUID } from 'node:crypto'
import { EventEmitter } from 'node:events'
import { Readable } from 'node:stream'
import { Command, commandControl, type CommandHost, type CommandResult, type LogChunk } from './command.js'
import { CommandSnapshot, ENDED_STATUSES, parseSnapshot } from './command-snapshot.js'
import type { DriverName } from './drivers/types.js'
import { imageCommand } from './images/oci/command.js'
import type { ImageManifest, ProgressEvent } from './images/types.js'
import type { NetworkDenial, NetworkUsage, SandboxNetwork } from './network/gateway.js'
import type { NetworkPolicy } from './network/policy.js'
import { SandboxError } from './errors.js'
import {
  type SandboxInfoResponse,
  type SandboxSetLifetimeRequest,
  type SandboxSetLifetimeResponse,
} from './protocol/contract.gen.js'
import { newSandboxFs, type SandboxFs } from './fs.js'
import {
  BROKEN_CONNECTION_GRACE_MS,
  EXEC_MAX_BUFFER_BYTES,
  EXEC_TIMEOUT_MS,
  HEARTBEAT_MS,
  HOST_GRACE_MS,
  IDEMPOTENCY_KEY_CHARS,
  IDLE_TIMEOUT_MS,
  MAX_TTL_MS,
  KILL_GRACE_MS,
  RETAIN_BYTES,
  WAIT_FOR_TIMEOUT_MS,
} from './defaults.js'
import { assertInternal, INTERNAL } from './internal.js'
import {
  assertString,
  envMap,
  intInRange,
  optionalAbortSignal,
  optionalBoolean,
  optionalString,
  optionsObject,
  stringArray,
  absolutePath,
  oneOf,
  commandTimeout,
  userSpec,
} from './options.js'
import type { AgentConnection } from './protocol/client.js'
import {
  connectPort,
  forwardPort,
  type PortConnectOptions,
  type PortForward,
  type PortForwardOptions,
  type PortSocket,
} from './ports.js'
import { canTransition, DestroyedReason, isLive, SandboxStatus } from './sandbox-status.js'
import { traceEnv, withSpan } from './telemetry.js'
import { openTerminal, ptySize, type Terminal, type TerminalOptions } from './terminal.js'
import type { ExecOptions, StartOptions } from './exec-options.js'
import { layerStream, snapshotName, snapshotStoreControl, type SnapshotInfo, type SnapshotStore } from './snapshots.js'
import { exportPlan, type ExportOptions, type ExportResult } from './images/oci/export-options.js'
import type { CreateOptions } from './create-options.js'
import { CodeInterpreter } from './code/interpreter.js'
import type { CodeContext, CodeEvent, CreateCodeContextOptions, Execution, RunCodeOptions } from './code/types.js'

export type { ExecOptions, StartOptions }
import type { ArtifactsRecord, ArtifactWhen } from './artifacts.js'
import {
  collectCommandFiles,
  collectOption,
  collectWanted,
  type CollectConfig,
  type CollectOptions,
} from './command-collect.js'
import { errors } from './protocol/errors.gen.js'

/** A port of the sandbox reachable from the host: a forward on the host's loopback (sb.url(), sb.forward()). */
export interface SandboxService {
  /** The port inside the sandbox. */
  port: number
  /** The host port (127.0.0.1) that carries it. */
  hostPort: number
  /** `http://127.0.0.1:<hostPort>/`; any TCP protocol goes through the same port. */
  url: string
}

export interface ExecResult<T extends string | Buffer = string> extends CommandResult {
  stdout: T
  stderr: T
  success: boolean
  /** With `collect`: what was exported when the command ended (null when collectOn did not ask for it). */
  artifacts?: ArtifactsRecord | null
}

/** exec()'s own options: start()'s, plus the result's buffering and what to export when the command ends. */
export interface ExecOnlyOptions {
  /** Export these paths when the command ends, to `<to>/<commandId>.tar` and `.json` (the record of create's artifacts). */
  collect?: CollectOptions
  /** When to export: always (default), on_success (exited 0) or on_failure (anything else). */
  collectOn?: ArtifactWhen
  /** Called with each stdout chunk as it arrives; the result still holds all of it (up to maxBuffer). An exception it throws is dropped. */
  onStdout?: (data: Buffer) => void
  /** Called with each stderr chunk as it arrives; the result still holds all of it (up to maxBuffer). */
  onStderr?: (data: Buffer) => void
}

export interface SandboxEvents {
  status: [status: SandboxStatus, previous: SandboxStatus]
  /** The image is being built on first use (status `creating`); listen with `create({ wait: false })`. */
  progress: [event: ProgressEvent]
  destroyed: [reason: DestroyedReason]
  error: [error: SandboxError]
  /** A lookup or connection the network policy refused (docs/network.md). */
  'network-denied': [denial: NetworkDenial]
}

/** What stop() resolves with. */
export interface StopResult {
  sandboxId: string
  /** True when this call ended the sandbox; false when it had ended by itself (idle, TTL, crash) or never booted. */
  stopped: boolean
}

/** `sb.info()`: the sandbox as its agent sees it (the contract's sandbox.info answer). Times are ms since the epoch. */
export interface SandboxAgentInfo extends SandboxInfoResponse {
  /** The services this handle exposes on the host (sb.services), added by the host to the agent's report. */
  services: SandboxService[]
}

/** What the runtime hands a sandbox: how to reach it and how to end it. */
export interface SandboxBackend {
  connection: AgentConnection
  /** Ends the sandbox process and removes host-side state; resolves when nothing is left. */
  destroy(reason: DestroyedReason): Promise<void>
  /** Resolves with the reason when the sandbox ends on its own (TTL, idle, crash). */
  ended: Promise<DestroyedReason>
}

/** Where Sandbox.create() and Sandbox.attach() go: the default runtime, which lib/runtime.ts registers (it imports this module, not the reverse). */
export interface SandboxMaker {
  create(options?: CreateOptions): Promise<Sandbox>
  attach(id: string, options: { accessToken?: string }): Promise<Sandbox>
}
let defaultMaker: (() => SandboxMaker) | null = null

export function registerDefaultRuntime(get: () => SandboxMaker): void {
  defaultMaker = get
}

function defaultRuntime(): SandboxMaker {
  if (!defaultMaker)
    throw errors.internal({
      context: 'krunbox was loaded without its runtime module',
      reason: 'import it from the package entry point',
    })
  return defaultMaker()
}

/**
 * What krunbox's own modules (the runtime and its boot pipeline) do to a sandbox and a caller
 * must not. Exported from this module, never from lib/index.ts, so no caller reaches it.
 */
export interface SandboxControl {
  create(info: SandboxInfo, accessToken: string | null): Sandbox
  /** The id of the image once it is resolved. */
  setImageVersion(sb: Sandbox, id: string): void
  /** Where execImageCommand() finds the image's manifest (null: the image is gone or changed). */
  useImageManifest(sb: Sandbox, lookup: () => Promise<ImageManifest | null>): void
  setStatus(sb: Sandbox, next: SandboxStatus): void
  /** The host side of the network policy. */
  attachNetwork(sb: Sandbox, network: SandboxNetwork): void
  /** The booted sandbox: from here on the handle talks to its agent. */
  attachBackend(sb: Sandbox, backend: SandboxBackend): void
  markFailed(sb: Sandbox, error: SandboxError): void
  /** The runtime's snapshot store, the snapshot the sandbox booted from, and its state directory (for staging). */
  useSnapshots(sb: Sandbox, store: SnapshotStore, parent: string | null, stateDir: string): void
}
let control!: SandboxControl

export interface SandboxInfo {
  id: string
  name: string | null
  image: string
  imageVersion: string
  driver: DriverName
  metadata: Record<string, string>
  env: Record<string, string>
  expiresAt: number | null
  idleTimeoutMs: number
  network: NetworkPolicy | null
}

function streamListener(value: unknown, name: string): ((data: Buffer) => void) | undefined {
  if (value !== undefined && typeof value !== 'function')
    throw errors.badArgument({ subject: name, problem: `must be a function, got ${typeof value}` })
  return value as ((data: Buffer) => void) | undefined
}

/** One stream's output kept for an exec result, at most `max` bytes. */
class Collected {
  #parts: Buffer[] = []
  #size = 0
  cut = false

  constructor(readonly max: number) {}

  add(data: Buffer): void {
    const room = this.max - this.#size
    if (data.length > room) this.cut = true
    if (room <= 0) return
    const piece = data.length > room ? data.subarray(0, room) : data
    this.#parts.push(piece)
    this.#size += piece.length
  }

  bytes(): Buffer {
    return Buffer.concat(this.#parts)
  }
}

const EXEC_KEYS = [
  'cwd',
  'env',
  'timeoutMs',
  'killGraceMs',
  'stdin',
  'signal',
  'shell',
  'encoding',
  'maxBuffer',
  'retainBytes',
  'idempotencyKey',
  'user',
  'collect',
  'collectOn',
  'onStdout',
  'onStderr',
] as const
const START_KEYS = [
  'cwd',
  'env',
  'timeoutMs',
  'killGraceMs',
  'stdin',
  'signal',
  'shell',
  'retainBytes',
  'idempotencyKey',
  'user',
  'heartbeatMs',
  'pty',
] as const

/**
 * A sandbox. Its events (and those of Command, Terminal, PortForward) are typed through Node's
 * generic `EventEmitter<T>`: a TypeScript project needs `@types/node` 20.11 or newer for `.on`
 * and `.once` to type-check.
 */
export class Sandbox extends EventEmitter<SandboxEvents> {
  readonly id: string
  readonly name: string | null
  readonly image: string
  readonly driver: DriverName
  readonly metadata: Readonly<Record<string, string>>
  /** The network policy (null: no network but the sandbox's own loopback). */
  readonly network: Readonly<NetworkPolicy> | null
  /** Given once, by create(); other processes need it to attach. Only its hash is stored. */
  readonly accessToken: string | null
  readonly fs: SandboxFs
  #imageVersion: string
  #expiresAt: number | null
  #idleTimeoutMs: number
  #imageManifest: (() => Promise<ImageManifest | null>) | null = null
  #status: SandboxStatus = 'creating'
  #destroyedReason: DestroyedReason | null = null
  #error: SandboxError | null = null
  #backend: SandboxBackend | null = null
  #env: Record<string, string>
  #commands = new Map<string, Command>()
  #byKey = new Map<string, Command>()
  #keyOf = new WeakMap<Command, string>()
  #active = new Set<Command>()
  #stopping: Promise<void> | null = null
  #snapshots: { store: SnapshotStore; parent: string | null; stateDir: string } | null = null
  #network: SandboxNetwork | null = null
  /** Forwards this handle opened (forward(), url()), while they listen. */
  #forwards = new Set<PortForward>()
  /** url(port)'s forward for each port, shared by concurrent calls. */
  #urlForwards = new Map<number, Promise<PortForward>>()
  /** The code contexts (runCode), made on first use. */
  #code: CodeInterpreter | null = null

  static {
    control = {
      create: (info, accessToken) => new this(INTERNAL, info, accessToken),
      setImageVersion: (sb, id) => (sb.#imageVersion = id),
      useImageManifest: (sb, lookup) => (sb.#imageManifest = lookup),
      setStatus: (sb, next) => sb.#setStatus(next),
      attachNetwork: (sb, network) => sb.#attachNetwork(network),
      attachBackend: (sb, backend) => sb.#attachBackend(backend),
      markFailed: (sb, error) => sb.#markFailed(error),
      useSnapshots: (sb, store, parent, stateDir) => (sb.#snapshots = { store, parent, stateDir }),
    }
  }

  /** Creates a sandbox on the default runtime (one per process, default configuration). */
  static create(options?: CreateOptions): Promise<Sandbox> {
    return defaultRuntime().create(options)
  }

  /** A handle on a live sandbox created by any process of this user, given its access token. */
  static attach(id: string, options: { accessToken?: string }): Promise<Sandbox> {
    return defaultRuntime().attach(id, options)
  }

  /** Use Sandbox.create(), runtime.create() or Sandbox.attach(). */
  private constructor(key: typeof INTERNAL, info: SandboxInfo, accessToken: string | null) {
    assertInternal(key, 'Sandbox', 'Sandbox.create(), runtime.create() or Sandbox.attach()')
    super()
    this.id = info.id
    this.name = info.name
    this.image = info.image
    this.#imageVersion = info.imageVersion
    this.driver = info.driver
    this.metadata = Object.freeze({ ...info.metadata })
    this.#expiresAt = info.expiresAt
    this.#idleTimeoutMs = info.idleTimeoutMs
    this.network = info.network
    this.accessToken = accessToken
    this.#env = info.env
    this.fs = newSandboxFs(() => this.#connection())
    // 'error' without a listener would throw; sandbox errors are also reported through status.
    this.on('error', () => {})
  }

  /** The immutable id of the image the sandbox runs (known once the image is resolved). */
  get imageVersion(): string {
    return this.#imageVersion
  }

  /**
   * When the TTL ends the sandbox (ms since the epoch); null without a TTL. As this handle last
   * learnt it: from create or attach, its own extendTtl(), or info() (which follows every client's).
   */
  get expiresAt(): number | null {
    return this.#expiresAt
  }

  /** The idle timeout in ms (0: none), as this handle last learnt it (see expiresAt). */
  get idleTimeoutMs(): number {
    return this.#idleTimeoutMs
  }

  get status(): SandboxStatus {
    return this.#status
  }
  get destroyedReason(): DestroyedReason | null {
    return this.#destroyedReason
  }
  /** The boot error of a failed sandbox, or what broke the connection of a crashed one. */
  get error(): SandboxError | null {
    return this.#error
  }

  /**
   * What the sandbox's network policy let through and refused, as counted by the process that
   * created the sandbox (null on a handle from attach, or without a network policy).
   */
  get usage(): { network: NetworkUsage | null } {
    return { network: this.#network?.usage() ?? null }
  }

  #attachNetwork(network: SandboxNetwork): void {
    this.#network = network
    network.on('denied', (denial) => this.emit('network-denied', denial))
  }

  #setStatus(next: SandboxStatus): void {
    const prev = this.#status
    if (!canTransition(prev, next)) return
    this.#status = next
    this.emit('status', next, prev)
  }

  #attachBackend(backend: SandboxBackend): void {
    this.#backend = backend
    backend.connection.on('event', (event) => {
      if (event.type === 'shutdown' && (event.reason === 'ttl_expired' || event.reason === 'idle_expired'))
        this.#setStatus('expiring')
    })
    backend.connection.once('closed', (error) => {
      if (error) this.#connectionBroke(backend, error)
    })
    void backend.ended.then((reason) => this.#markDestroyed(reason))
    this.#setStatus('ready')
  }

  /**
   * The connection is this handle's only way to the agent. It normally breaks because the
   * sandbox process ended (backend.ended then says why); if the process is still there after
   * a grace period, the sandbox is unusable, so it is ended and reported crashed with the error.
   */
  #connectionBroke(backend: SandboxBackend, error: SandboxError): void {
    const timer = setTimeout(() => {
      if (this.#stopping || !isLive(this.#status)) return
      this.#error = error
      this.#destroyedReason = 'crashed'
      this.#stopping = backend.destroy('crashed').catch(() => {})
      void this.#stopping.then(() => this.#markDestroyed('crashed'))
    }, BROKEN_CONNECTION_GRACE_MS)
    timer.unref()
    void backend.ended.then(() => clearTimeout(timer))
  }

  #markFailed(error: SandboxError): void {
    this.#error = error
    this.#setStatus('failed')
    this.emit('error', error)
  }

  /** Resolves when the sandbox is ready; rejects with its boot error if it failed. */
  ready(options?: { timeoutMs?: number }): Promise<void> {
    return this.waitFor('ready', options)
  }

  /** Waits until the sandbox reaches `status` (ready also counts running/idle). */
  waitFor(status: SandboxStatus, options?: { timeoutMs?: number }): Promise<void> {
    const o = optionsObject(options, 'waitFor options', ['timeoutMs'])
    const timeoutMs = intInRange(
      o.timeoutMs,
      'timeoutMs',
      WAIT_FOR_TIMEOUT_MS.min,
      WAIT_FOR_TIMEOUT_MS.max,
      WAIT_FOR_TIMEOUT_MS.default,
    )
    const wanted = oneOf(
      status,
      'status',
      ['creating', 'starting', 'ready', 'running', 'idle', 'paused', 'expiring', 'destroyed', 'failed'] as const,
      'ready',
    )
    const reached = (s: SandboxStatus) => s === wanted || (wanted === 'ready' && (s === 'running' || s === 'idle'))
    return new Promise((resolve, reject) => {
      const check = () => {
        if (reached(this.#status)) return finish(null)
        if (this.#status === 'failed')
          return finish(this.#error ?? errors.bootFailed({ sandboxId: this.id, reason: 'no cause was recorded' }))
        if (this.#status === 'destroyed' && wanted !== 'destroyed')
          return finish(
            errors.sandboxStopped({
              sandboxId: this.id,
              state: `was destroyed (${this.#destroyedReason}) before reaching ${wanted}`,
            }),
          )
      }
      const finish = (err: SandboxError | null) => {
        clearTimeout(timer)
        this.removeListener('status', check)
        if (err) reject(err)
        else resolve()
      }
      const timer = setTimeout(
        () => finish(errors.statusWaitTimeout({ sandboxId: this.id, wanted, timeoutMs, status: this.#status })),
        timeoutMs,
      )
      this.on('status', check)
      check()
    })
  }

  /** Runs a command and waits for it. Exit codes, timeouts and signals are results; errors mean the request failed. */
  async exec(
    command: string,
    args?: string[],
    options?: ExecOptions & ExecOnlyOptions & { encoding?: 'utf8' },
  ): Promise<ExecResult<string>>
  async exec(
    command: string,
    args: string[] | undefined,
    options: ExecOptions & ExecOnlyOptions & { encoding: 'buffer' },
  ): Promise<ExecResult<Buffer>>
  async exec(
    command: string,
    args?: string[],
    options?: ExecOptions & ExecOnlyOptions,
  ): Promise<ExecResult<string | Buffer>> {
    const o = optionsObject(options, 'exec options', EXEC_KEYS)
    const encoding = oneOf(o.encoding, 'encoding', ['utf8', 'buffer'] as const, 'utf8')
    const maxBuffer = intInRange(
      o.maxBuffer,
      'maxBuffer',
      EXEC_MAX_BUFFER_BYTES.min,
      EXEC_MAX_BUFFER_BYTES.max,
      EXEC_MAX_BUFFER_BYTES.default,
    )
    if (o.stdin !== undefined && typeof o.stdin !== 'string' && !Buffer.isBuffer(o.stdin)) {
      throw errors.badArgument({
        subject: 'exec stdin',
        problem: `must be a string or Buffer, got ${typeof o.stdin}; use start() for streams`,
      })
    }
    const exports = collectOption(o.collect, o.collectOn)
    const listeners = { stdout: streamListener(o.onStdout, 'onStdout'), stderr: streamListener(o.onStderr, 'onStderr') }
    const { encoding: _e, maxBuffer: _m, collect: _c, collectOn: _w, onStdout: _so, onStderr: _se, ...startOptions } = o
    startOptions.timeoutMs = commandTimeout(o.timeoutMs, 'timeoutMs', EXEC_TIMEOUT_MS)
    return withSpan('krunbox.exec', { 'krunbox.sandbox.id': this.id, 'krunbox.command': command }, async () => {
      const cmd = this.start(command, args, startOptions as StartOptions)
      const out = { stdout: new Collected(maxBuffer), stderr: new Collected(maxBuffer) }
      const collect = (chunk: LogChunk) => {
        out[chunk.stream].add(chunk.data)
        try {
          listeners[chunk.stream]?.(chunk.data)
        } catch {
          // The caller's listener failing is not the command failing.
        }
      }
      cmd.on('log', collect)
      const signal = o.signal as AbortSignal | undefined
      let result: CommandResult
      try {
        result = await cmd.wait()
      } finally {
        // The command may outlive this call (another handle of the same key); its output must not.
        cmd.removeListener('log', collect)
      }
      if (signal?.aborted && result.status === 'canceled') {
        throw errors.aborted({ subject: `exec of ${command}`, problem: 'was aborted' }, { cause: signal.reason })
      }
      const stdout = out.stdout.bytes()
      const stderr = out.stderr.bytes()
      const artifacts =
        exports === undefined
          ? {}
          : { artifacts: collectWanted(exports.when, result) ? await this.#collect(cmd.id, exports) : null }
      return {
        ...result,
        ...artifacts,
        stdout: encoding === 'buffer' ? stdout : stdout.toString('utf8'),
        stderr: encoding === 'buffer' ? stderr : stderr.toString('utf8'),
        // exec follows the command from its first byte, so its output is only incomplete when
        // maxBuffer cut it (the agent's retention window doesn't matter here).
        stdoutTruncated: out.stdout.cut,
        stderrTruncated: out.stderr.cut,
        success: result.status === 'exited' && result.exitCode === 0,
      }
    })
  }

  /**
   * Runs the image's own command and waits for it, as `docker run` does without a command: its
   * Entrypoint followed by `args`, or else by its Cmd. Like any command it runs in the image's
   * WorkingDir, as its User, over its Env (all as create() set them); options as exec()'s.
   * S001 when the image names neither Entrypoint nor Cmd (presets and custom trees) and no args.
   */
  async execImageCommand(
    args?: string[],
    options?: ExecOptions & ExecOnlyOptions & { encoding?: 'utf8' },
  ): Promise<ExecResult<string>>
  async execImageCommand(
    args: string[] | undefined,
    options: ExecOptions & ExecOnlyOptions & { encoding: 'buffer' },
  ): Promise<ExecResult<Buffer>>
  async execImageCommand(
    args?: string[],
    options?: ExecOptions & ExecOnlyOptions,
  ): Promise<ExecResult<string | Buffer>> {
    const given = args === undefined ? undefined : stringArray(args, 'args')
    const manifest = this.#imageManifest === null ? null : await this.#imageManifest()
    if (manifest === null) {
      throw errors.imageUnknown({
        subject: `image ${this.image} of sandbox ${this.id}`,
        problem: `is no longer the version ${this.#imageVersion || '(not resolved yet)'} the sandbox runs, so its command is not known`,
      })
    }
    const argv = imageCommand(manifest, given)
    if (argv === null) {
      throw errors.badArgument({
        subject: `image ${this.image}`,
        problem: 'has no Entrypoint or Cmd of its own: give a command, sb.exec(command, args)',
      })
    }
    // One call for both encodings: exec itself picks the result type from options.encoding.
    return this.exec(argv[0], argv.slice(1), options as ExecOptions & ExecOnlyOptions & { encoding?: 'utf8' })
  }

  /**
   * Starts a command on a pseudo-terminal (a shell, a REPL, a full-screen program): write()
   * types into it, 'data' is its output, resize() changes its window, wait() and kill() as for
   * a command. TERM defaults to xterm-256color.
   */
  pty(command: string, args?: string[], options?: TerminalOptions): Terminal {
    return openTerminal(this, command, args, options)
  }

  /** exec's collect: the sandbox's files as the command left them (a sandbox that ended meanwhile is the record's error). */
  async #collect(commandId: string, config: CollectConfig): Promise<ArtifactsRecord> {
    let conn: AgentConnection
    try {
      conn = this.#connection()
    } catch (err) {
      return {
        tar: '',
        files: [],
        bytes: 0,
        truncated: false,
        error: (err as SandboxError).code,
        message: (err as SandboxError).message,
      }
    }
    return collectCommandFiles(this.fs, conn, commandId, config)
  }

  /** Starts a command and returns at once; follow it with events, logs(), wait(). */
  start(command: string, args?: string[], options?: StartOptions): Command {
    assertString(command, 'command')
    const argList = stringArray(args, 'args')
    const o = optionsObject(options, 'start options', START_KEYS)
    const timeoutMs = commandTimeout(o.timeoutMs, 'timeoutMs', null)
    const killGraceMs = intInRange(
      o.killGraceMs,
      'killGraceMs',
      KILL_GRACE_MS.min,
      KILL_GRACE_MS.max,
      KILL_GRACE_MS.default,
    )
    const retainBytes =
      o.retainBytes === undefined
        ? undefined
        : intInRange(o.retainBytes, 'retainBytes', RETAIN_BYTES.min, RETAIN_BYTES.max)
    const cwd = o.cwd === undefined ? undefined : absolutePath(o.cwd, 'cwd')
    const env = { ...this.#env, ...envMap(o.env, 'env'), ...traceEnv() }
    const shell = optionalBoolean(o.shell, 'shell', false)
    const signal = optionalAbortSignal(o.signal, 'signal')
    const key = optionalString(o.idempotencyKey, 'idempotencyKey')
    const user = userSpec(o.user, 'user')
    const heartbeatMs =
      o.heartbeatMs === 0
        ? 0
        : intInRange(o.heartbeatMs, 'heartbeatMs', HEARTBEAT_MS.min, HEARTBEAT_MS.max, HEARTBEAT_MS.default)
    if (key !== undefined && (key.length < IDEMPOTENCY_KEY_CHARS.min || key.length > IDEMPOTENCY_KEY_CHARS.max)) {
      throw errors.badArgument({
        subject: 'idempotencyKey',
        problem: `must be ${IDEMPOTENCY_KEY_CHARS.min}-${IDEMPOTENCY_KEY_CHARS.max} characters, got ${key.length}`,
      })
    }
    const pty = o.pty === undefined ? undefined : ptySize(o.pty, 'pty')
    const stdin = o.stdin
    if (stdin !== undefined && typeof stdin !== 'string' && !Buffer.isBuffer(stdin) && !(stdin instanceof Readable)) {
      throw errors.badArgument({
        subject: 'stdin',
        problem: `must be a string, Buffer or Readable, got ${typeof stdin}`,
      })
    }
    const conn = this.#connection()
    if (key !== undefined) {
      const existing = this.#byKey.get(key)
      if (existing) return existing
    }
    if (signal?.aborted)
      throw errors.aborted(
        { subject: `start of ${command}`, problem: 'was aborted before it began' },
        { cause: signal.reason },
      )
    const argv = shell ? ['/bin/sh', '-c', [command, ...argList].join(' ')] : [command, ...argList]
    const cmd = commandControl.create(
      this.#commandHost(conn),
      key === undefined ? `c-${randomUUID()}` : commandIdForKey(key),
      argv,
    )
    this.#commands.set(cmd.id, cmd)
    if (key !== undefined) {
      this.#byKey.set(key, cmd)
      this.#keyOf.set(cmd, key)
    }
    this.#active.add(cmd)
    this.#refreshActivity()
    // The agent takes 0 as "no deadline".
    commandControl.begin(
      cmd,
      { argv, env, cwd, timeoutMs: timeoutMs ?? 0, killGraceMs, retainBytes, idempotencyKey: key, user, pty },
      stdin as string | Buffer | Readable | undefined,
      heartbeatMs,
    )
    // The agent enforces the timeout; this only guards against an agent that stopped answering:
    // past timeoutMs + killGraceMs + HOST_GRACE_MS without a result the host gives up (S200) and
    // asks, without waiting, for the process to be killed. While the sandbox is paused, timeouts
    // are suspended, so the guard waits another round. A command with no deadline has no guard:
    // it may rightly run for days, and a lost connection still ends it (S205).
    const deadline = (timeoutMs ?? 0) + killGraceMs + HOST_GRACE_MS
    const armBackstop = (): NodeJS.Timeout | undefined =>
      timeoutMs === null
        ? undefined
        : setTimeout(() => {
            if (this.#status === 'paused') {
              backstop = armBackstop()
              return
            }
            void conn
              .call('exec.cancel', { commandId: cmd.id, mode: 'force', graceMs: 0 }, { timeoutMs: HOST_GRACE_MS })
              .catch(() => {})
            commandControl.giveUp(
              cmd,
              errors.timedOut({
                subject: `command ${cmd.id} (${argv[0]}): the sandbox agent`,
                problem: `reported no result within ${deadline} ms (timeoutMs ${timeoutMs} + killGraceMs ${killGraceMs} + ${HOST_GRACE_MS})`,
              }),
            )
          }, deadline).unref()
    let backstop = armBackstop()
    const onAbort = () => void cmd.cancel({ mode: 'graceful', graceMs: killGraceMs }).catch(() => {})
    signal?.addEventListener('abort', onAbort, { once: true })
    void cmd
      .wait()
      .catch(() => {})
      .finally(() => {
        clearTimeout(backstop)
        signal?.removeEventListener('abort', onAbort)
      })
    return cmd
  }

  /** Every command of the sandbox (also those started by other processes), as the agent reports them. */
  async commands(): Promise<CommandSnapshot[]> {
    const body = await this.#connection().call('exec.list', {})
    return body.commands.map(parseSnapshot)
  }

  /** Finds a command by id, also one started by another process; undefined if the sandbox has none. */
  async command(id: string): Promise<Command | undefined> {
    assertString(id, 'command id')
    const known = this.#commands.get(id)
    if (known) return known
    const conn = this.#connection()
    let body
    try {
      body = await conn.call('exec.get', { commandId: id })
    } catch (err) {
      if (err instanceof SandboxError && err.code === 'S008') return undefined
      throw err
    }
    let snap: CommandSnapshot
    try {
      snap = parseSnapshot(body.command)
    } catch (err) {
      throw errors.badFrame({
        subject: `exec.get answer for ${id}`,
        problem: `does not fit: ${(err as Error).message}`,
      })
    }
    if (snap.id !== id)
      throw errors.badFrame({ subject: `exec.get for ${id}`, problem: `answered with command ${snap.id}` })
    const cmd = commandControl.create(this.#commandHost(conn), snap.id, snap.argv)
    // A live command is followed until it ends (then it is forgotten here, like every other).
    if (!ENDED_STATUSES.has(snap.status)) this.#commands.set(cmd.id, cmd)
    commandControl.adopt(cmd, snap, true)
    return cmd
  }

  /**
   * Freezes what commands and fs ops wrote since boot (not /tmp, /dev/shm nor running processes)
   * into an immutable, content-addressed snapshot that create({ from }) boots from.
   * See docs/pool-and-snapshots.md.
   */
  async snapshot(options?: { name?: string }): Promise<SnapshotInfo> {
    const o = optionsObject(options, 'snapshot options', ['name'])
    const name = o.name === undefined ? undefined : snapshotName(o.name)
    const conn = this.#connection()
    if (!this.#snapshots)
      throw errors.unsupported({
        op: 'snapshot',
        why: `for sandbox ${this.id}: it was attached, not created here; take its snapshot in the process that created it`,
      })
    const { store, parent, stateDir } = this.#snapshots
    const staging = `${stateDir}/snapshot-${randomUUID()}.tmp`
    return withSpan('krunbox.snapshot', { 'krunbox.sandbox.id': this.id }, () =>
      snapshotStoreControl.capture(
        store,
        layerStream(conn),
        { image: this.image, imageVersion: this.#imageVersion, parent, name },
        staging,
      ),
    )
  }

  /**
   * Runs a cell in a kernel that keeps its state between calls (docs/code-interpreter.md): the
   * language's default context unless `context` names one. Resolves with its results (MIME
   * bundles), logs and error (a cell that raises is a result); a kernel that cannot start is
   * S224, one that died S227 (the context starts a new one on its next call, which says so).
   */
  runCode(code: string, options?: RunCodeOptions): Promise<Execution> {
    return this.#interpreter().runCode(code, options)
  }

  /** runCode's outputs as they come, as an async iterator; the last event is `end` with the execution. */
  runCodeStream(code: string, options?: RunCodeOptions): AsyncGenerator<CodeEvent, void, undefined> {
    return this.#interpreter().runCodeStream(code, options)
  }

  /** A new kernel of its own (language, cwd, env), started before this resolves. */
  createCodeContext(options?: CreateCodeContextOptions): Promise<CodeContext> {
    return this.#interpreter().createContext(options)
  }

  /** The contexts this handle made, the default ones included. */
  codeContexts(): CodeContext[] {
    return this.#code?.list() ?? []
  }

  /** A new kernel for the context: its state is gone. */
  restartCodeContext(context: CodeContext | string): Promise<void> {
    return this.#interpreter().restart(context)
  }

  /** Stops the context's kernel; the context can no longer be used. */
  removeCodeContext(context: CodeContext | string): Promise<void> {
    return this.#interpreter().remove(context)
  }

  #interpreter(): CodeInterpreter {
    this.#connection() // a stopped sandbox is S004 here, as for every other call
    this.#code ??= new CodeInterpreter(this)
    return this.#code
  }

  /**
   * The sandbox as an OCI image: the layers of its image and one of what commands and fs ops
   * wrote since boot (as snapshot() takes it; no snapshot is kept), written as an OCI image
   * layout or a `docker save`-compatible tar, or pushed to a registry, with `config` set over the
   * image's own. See docs/images.md, "Export".
   */
  async commit(options: ExportOptions): Promise<ExportResult> {
    const plan = exportPlan(options)
    const conn = this.#connection()
    if (!this.#snapshots)
      throw errors.unsupported({
        op: 'commit',
        why: `for sandbox ${this.id}: it was attached, not created here; commit it in the process that created it`,
      })
    const { store, parent, stateDir } = this.#snapshots
    const staging = `${stateDir}/commit-${randomUUID()}.tmp`
    return withSpan('krunbox.commit', { 'krunbox.sandbox.id': this.id }, () =>
      snapshotStoreControl.commit(
        store,
        layerStream(conn),
        { image: this.image, imageVersion: this.#imageVersion, parent, sandboxId: this.id },
        staging,
        plan,
      ),
    )
  }

  /** Freezes every process in the sandbox; command timeouts are suspended. */
  async pause(): Promise<void> {
    const conn = this.#connection()
    await conn.call('sandbox.pause', {})
    this.#setStatus('paused')
  }

  async resume(): Promise<void> {
    const conn = this.#connection()
    await conn.call('sandbox.resume', {})
    this.#setStatus('ready')
    this.#refreshActivity()
  }

  /** A TCP connection to `port` on the sandbox's loopback, carried by the agent (no sandbox network needed). */
  async connect(port: number, options?: PortConnectOptions): Promise<PortSocket> {
    return connectPort(() => this.#connection(), port, options)
  }

  /** Listens on the host's 127.0.0.1 (hostPort, or a free port) and carries each connection to `port`; closes when the sandbox ends. */
  async forward(port: number, options?: PortForwardOptions): Promise<PortForward> {
    const fw = await forwardPort(this, () => this.#connection(), port, options)
    this.#forwards.add(fw)
    fw.once('close', () => this.#forwards.delete(fw))
    return fw
  }

  /**
   * The URL on the host of a service listening on `port` in the sandbox: the first call opens a
   * forward (as forward(port) would), later calls give the same URL while it listens. The
   * forward closes when the sandbox ends, or with `close()` on its entry of forwards.
   */
  async url(port: number): Promise<string> {
    let pending = this.#urlForwards.get(port)
    if (!pending) {
      pending = this.forward(port)
      this.#urlForwards.set(port, pending)
      pending.then(
        (fw) => fw.once('close', () => this.#urlForwards.delete(port)),
        () => this.#urlForwards.delete(port),
      )
    }
    return serviceOf(await pending).url
  }

  /** The ports this handle exposes on the host (url(), forward()) while they listen; empty once the sandbox ended. */
  get services(): SandboxService[] {
    return [...this.#forwards].map(serviceOf)
  }

  /** What the agent reports about itself (activity, deadlines), with the services this handle exposes. */
  async info(): Promise<SandboxAgentInfo> {
    const body = await this.#connection().call('sandbox.info', {})
    this.#learnLifetime(body)
    return { ...body, services: this.services }
  }

  /**
   * Moves the TTL deadline `ms` later (1 ms – 365 days), for every client of the sandbox: its
   * agent enforces the new deadline, also with no host process left (detached), and info() and
   * list() show it anywhere. Concurrent extensions all count. Resolves with the new deadline.
   * S001 on a sandbox created without a TTL; S402 when the deadline would pass the sandbox's
   * creation + the maxTtlMs of the runtime that created it (fixed at boot: a client of a runtime
   * with a larger maxTtlMs, or one talking to the agent directly, cannot go further).
   */
  async extendTtl(ms: number): Promise<{ expiresAt: number }> {
    const by = intInRange(ms, 'extendTtl ms', 1, MAX_TTL_MS.max)
    const body = await this.#setLifetime({ extendByMs: by })
    if (typeof body.expiresAt !== 'number')
      throw errors.badFrame({
        subject: `sandbox.setLifetime answer for sandbox ${this.id}`,
        problem: 'has no expiresAt after an extension',
      })
    return { expiresAt: body.expiresAt }
  }

  /**
   * Sets the idle timeout to `ms` (0 disables it; at most 7 days, else S402), counted from the
   * last command or call as before, for every client of the sandbox and enforced by its agent.
   */
  async setIdleTimeout(ms: number): Promise<void> {
    const idle = intInRange(ms, 'setIdleTimeout ms', IDLE_TIMEOUT_MS.min, Number.MAX_SAFE_INTEGER)
    if (idle > IDLE_TIMEOUT_MS.max)
      throw errors.lifetimeOverMax({ subject: `idleTimeoutMs ${idle}`, max: `${IDLE_TIMEOUT_MS.max} ms` })
    await this.#setLifetime({ idleTimeoutMs: idle })
  }

  async #setLifetime(request: SandboxSetLifetimeRequest): Promise<SandboxSetLifetimeResponse> {
    const body = await this.#connection().call('sandbox.setLifetime', request)
    this.#learnLifetime(body)
    return body
  }

  /** Keeps the deadlines the agent reported (its answers are checked against the contract). */
  #learnLifetime(body: { expiresAt: number | null; idleTimeoutMs: number }): void {
    this.#expiresAt = body.expiresAt
    this.#idleTimeoutMs = body.idleTimeoutMs
  }

  /**
   * Stops the sandbox and removes everything it had on the host. Resolves `{ sandboxId, stopped }`:
   * stopped is true when this call ended it, false when it had already ended by itself (idle
   * timeout, TTL, crash) or failed to boot, so a `finally { await sb.stop() }` holds whatever
   * ended it. A second stop() fails with S004 (docs/api.md, "Differences from the reference APIs").
   */
  async stop(): Promise<StopResult> {
    const notByThisCall = { sandboxId: this.id, stopped: false }
    if (!this.#stopping && this.#status === 'destroyed' && this.#destroyedReason !== 'user_killed') return notByThisCall
    if (this.#stopping || !isLive(this.#status))
      throw errors.sandboxStopped({ sandboxId: this.id, state: `is already stopped (${this.#status})` })
    const backend = this.#backend
    if (!backend) {
      // Still booting: wait for the boot to settle, then stop what it produced.
      await this.ready().catch(() => {})
      if (!this.#backend) {
        this.#stopping = Promise.resolve()
        return notByThisCall
      }
      return this.stop()
    }
    // The shutdown request is written on the next turn of the loop: a caller that stops one
    // sandbox and goes on (`void sb.stop()`) does not hold up whatever is queued behind it,
    // such as other callers' acquire() (a socket write can wake the agent and yield the core).
    this.#stopping = withSpan('krunbox.stop', { 'krunbox.sandbox.id': this.id }, async () => {
      await new Promise((resolve) => setImmediate(resolve))
      return backend.destroy('user_killed')
    })
    await this.#stopping
    this.#markDestroyed('user_killed')
    return { sandboxId: this.id, stopped: true }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    if (isLive(this.#status) && !this.#stopping) await this.stop()
  }

  /** Commands this handle started or followed that have not ended yet. */
  get activeCommands(): number {
    return this.#active.size
  }

  #connection(): AgentConnection {
    if (this.#stopping || this.#status === 'destroyed')
      throw errors.sandboxStopped({ sandboxId: this.id, state: `is stopped (${this.#destroyedReason ?? 'stopping'})` })
    if (this.#status === 'failed')
      throw errors.sandboxStopped({ sandboxId: this.id, state: `failed to boot: ${this.#error?.message}` })
    // Exec, fs, ports and info alike: once its idle timeout or TTL has begun the cleanup, nothing new starts.
    if (this.#status === 'expiring')
      throw errors.sandboxStopped({
        sandboxId: this.id,
        state: 'is expiring: its cleanup has begun and new operations are refused',
      })
    if (!this.#backend)
      throw errors.sandboxStopped({
        sandboxId: this.id,
        state: `is not ready yet (${this.#status}); await sb.ready() first`,
      })
    return this.#backend.connection
  }

  #commandHost(conn: AgentConnection): CommandHost {
    return {
      connection: () => conn,
      commandEnded: (c) => this.#commandEnded(c),
      stopping: () => this.#stopping !== null,
    }
  }

  /** An ended command is the caller's to keep: the sandbox forgets it (the agent still answers about it). */
  #commandEnded(cmd: Command): void {
    this.#active.delete(cmd)
    if (this.#commands.get(cmd.id) === cmd) this.#commands.delete(cmd.id)
    const key = this.#keyOf.get(cmd)
    if (key !== undefined && this.#byKey.get(key) === cmd) this.#byKey.delete(key)
    this.#refreshActivity()
  }

  #refreshActivity(): void {
    if (this.#status === 'paused' || !isLive(this.#status) || !this.#backend) return
    this.#setStatus(this.#active.size > 0 ? 'running' : 'idle')
  }

  #markDestroyed(reason: DestroyedReason): void {
    if (this.#status === 'destroyed') return
    this.#destroyedReason ??= reason
    this.#setStatus('destroyed')
    this.emit('destroyed', this.#destroyedReason)
  }
}

function serviceOf(fw: PortForward): SandboxService {
  return { port: fw.sandboxPort, hostPort: fw.port, url: `http://127.0.0.1:${fw.port}/` }
}

/**
 * The command id every client derives from an idempotency key, so that a retry from any
 * handle, in any process, names the command the first request started.
 */
export function commandIdForKey(key: string): string {
  return `k-${createHash('sha256').update(key, 'utf8').digest('hex').slice(0, 40)}`
}

export { control as sandboxControl }
