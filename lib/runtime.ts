/**
 * The runtime: custom images, the state directory, pools, attach, listing, stopping, and
 * host-exit cleanup, over its checked configuration (runtime-config.ts) and concurrency slots
 * (slots.ts); create() runs the boot pipeline of lib/create-pipeline.ts. No daemon: it lives in the caller's process, and every
 * sandbox it owns dies with that process.
 */
import fs from 'node:fs'
import path from 'node:path'
import { removeCgroupDirs, removeCgroupDirsSync } from './drivers/cgroups.js'
import { leftoverCgroupDirs } from './reaper.js'
import { sandboxIdMapping } from './drivers/idmap.js'
import type { BootedSandbox, DriverName } from './drivers/types.js'
import { DRIVERS } from './drivers/registry.js'
import { readArtifactsRecord, validDirIdentity, type ArtifactsRecord } from './artifacts.js'
import { CREATE_KEYS, type CreateOptions } from './create-options.js'
import { createSandbox, type CreateHost } from './create-pipeline.js'
import { ARTIFACTS_STOP_GRACE_MS, MAX_BOOT_MS, POOL_SIZE, STOP_GRACE_MS } from './defaults.js'
import { looksLikeReference } from './images/oci/reference.js'
import { splitPin } from './images/pin.js'
import type { ImageStore, ProgressListener, ResolvedImage } from './images/index.js'
import { assertString, intInRange, metadataMap, optionalBoolean, optionsObject, describe } from './options.js'
import { AgentConnection } from './protocol/client.js'
import { registerDefaultRuntime, Sandbox, sandboxControl, type SandboxBackend, type SandboxInfo } from './sandbox.js'
import type { DestroyedReason, SandboxStatus } from './sandbox-status.js'
import { StateDir, processStartTime, sha256, type SandboxRecord } from './state.js'
import {
  POOL_KEYS,
  POOLED_MARKER,
  poolControl,
  poolShape,
  type RecycleTicket,
  type SandboxPool,
  type PoolOptions,
} from './pool.js'
import { openSpare, recordInitState, resetSandbox } from './pool-reset.js'
import { snapshotStoreControl, type SnapshotStore } from './snapshots.js'
import { allowlistPolicy, checkAgainstAllowlist, type NetworkPolicy } from './network/policy.js'
import { parseRuntimeConfig, type RuntimeConfig, type RuntimeSettings } from './runtime-config.js'
import { runtimeClosed, Slots } from './slots.js'
import { errors } from './protocol/errors.gen.js'

// The option and config types live beside their checks; callers and lib/index.ts take them from here too.
export type { CreateOptions, NetworkPolicyOptions, SandboxCapability } from './create-options.js'
export type { ImageCaps, RuntimeConfig } from './runtime-config.js'

export interface SandboxListing {
  id: string
  name: string | null
  image: string
  ageMs: number
  status: SandboxStatus
  execInProgress: boolean
  expiresAt: number | null
  metadata: Record<string, string>
  destroyedReason?: DestroyedReason
  /** A sandbox that failed to boot (status `failed`): its error's code and message. */
  error?: { code: string; message: string }
  /** Waiting in one of this runtime's warm pools (not leased). */
  pooled: boolean
  /** Ended sandboxes with artifacts: what was kept (or the code of why not). */
  artifacts?: ArtifactsRecord | null
  /** Live sandboxes: the network policy (null: its own loopback only). */
  network?: NetworkPolicy | null
}

export interface ListOptions {
  includeHistorical?: boolean
  /** Only sandboxes whose metadata has every one of these key/value pairs. */
  metadata?: Record<string, string>
}

/** Every runtime of this process, for cleanup when the process exits. */
const runtimes = new Set<Runtime>()
let exitHookInstalled = false

function installExitHook(): void {
  if (exitHookInstalled) return
  exitHookInstalled = true
  process.once('exit', () => {
    for (const rt of runtimes) killOwnedSync(rt)
  })
}

/** Synchronous last-resort cleanup at process exit: kills what a runtime owns (set up in its class body). */
let killOwnedSync!: (rt: Runtime) => void
let stateOf!: (rt: Runtime) => StateDir

/** A runtime's state directory, for krunbox's own modules (the CLI) and tests; not part of the API. */
export function runtimeState(rt: Runtime): StateDir {
  return stateOf(rt)
}

/** What the runtime keeps of a sandbox it created, until it ends. */
interface LiveEntry {
  sandbox: Sandbox
  booted: BootedSandbox | null
  release: () => void
  /** Not detached: it dies with this process. */
  owned: boolean
  /** Being reset for a reuse pool's next lease (lib/pool-reset.ts): the ended handle no longer frees it. */
  recycling?: boolean
  /** What each reset gives the agent back, recorded before the first lease (a reuse pool's member). */
  initState?: string
}

/** What a reuse pool asks of a leased member's stop (PoolHost.recycleOnStop). */
interface Recycler {
  upperMb: number
  /** The reset's connection, made at the lease's start (lib/pool-reset.ts openSpare). */
  spare: Promise<AgentConnection>
  ticket: RecycleTicket
  /** The next lease's handle, or null when the sandbox ended instead (resetFailed: a reset was tried and failed). */
  done(next: Sandbox | null, resetFailed: boolean, resetMs?: number): void
}

export class Runtime {
  readonly images: ImageStore
  readonly #state: StateDir
  readonly #settings: RuntimeSettings
  /** Slots under maxConcurrentSandboxes, taken synchronously in create(), so parallel creates cannot race past the cap. */
  readonly #slots: Slots
  readonly #customImages = new Map<string, Promise<ResolvedImage>>()
  #live = new Map<string, LiveEntry>()
  /** Snapshots (sb.snapshot()) live in `<stateDir>/.snapshots`. */
  readonly snapshots: SnapshotStore
  readonly #pools = new Set<SandboxPool>()
  /** Leased members of reuse pools whose holder's stop hands them back (by sandbox id). */
  readonly #recyclers = new Map<string, Recycler>()
  /** The current exit callback of each sandbox process (#whenExited). */
  readonly #exitWatchers = new WeakMap<BootedSandbox, { current: (() => void) | null }>()
  /** Resets in flight: close() waits for them. */
  readonly #resets = new Set<Promise<void>>()
  /** The image a reset rebuilds a root over, resolved once per version (a removed one fails krunbox-reset's open). */
  readonly #resetImages = new Map<string, Promise<ResolvedImage>>()

  static {
    killOwnedSync = (rt) => rt.#killOwnedSync()
    stateOf = (rt) => rt.#state
  }

  constructor(config?: RuntimeConfig) {
    const settings = parseRuntimeConfig(config)
    this.images = settings.images
    this.#settings = settings
    this.#slots = new Slots(settings.maxConcurrent, settings.queue, () => {
      for (const pool of this.#pools) poolControl.refill(pool)
    })
    this.#state = new StateDir(settings.stateDir)
    this.snapshots = snapshotStoreControl.create(path.join(this.#state.root, '.snapshots'), this.images)
    if (settings.pools !== undefined && !Array.isArray(settings.pools))
      throw errors.badRuntimeConfig({
        subject: 'pools',
        problem: `must be an array of pool options, got ${describe(settings.pools)}`,
      })
    const pools = ((settings.pools ?? []) as unknown[]).map((p, i) => this.#poolOptions(p, `pools[${i}]`))
    this.sweep()
    runtimes.add(this)
    installExitHook()
    for (const p of pools) this.pool(p)
  }

  /**
   * A warm pool of `size` ready sandboxes created with the given options (lib/pool.ts);
   * acquire() with the same options takes from it. Its members count against every cap.
   */
  pool(options: PoolOptions): SandboxPool {
    if (this.#slots.closed) throw runtimeClosed('pool()')
    const o = this.#poolOptions(options, 'pool options')
    const shape = poolShape(o)
    const pool = poolControl.create(
      {
        create: (opts) => this.create(opts),
        hasFreeSlot: () => this.#slots.hasFree(),
        sandboxDir: (sb) => this.#state.sandboxDir(sb.id),
        recordForReuse: (sb) => this.#recordForReuse(sb),
        recycleOnStop: (sb, upperMb, done) => this.#recycleOnStop(sb, upperMb, done),
      },
      o,
      this.#shapeKey(shape),
    )
    this.#pools.add(pool)
    // A pool shaped on a snapshot keeps it from being removed until the pool closes.
    const unhold =
      shape.from === undefined
        ? () => {}
        : snapshotStoreControl.hold(this.snapshots, this.snapshots.resolve(shape.from).id)
    pool.once('closed', () => {
      unhold()
      this.#pools.delete(pool)
    })
    return pool
  }

  /**
   * A sandbox for the caller alone: a ready one from a pool whose options are the same, at once,
   * or else a newly created one (or, from a reuse pool, one being reset once it is back). Stop it
   * when done: without `reuse` a pooled sandbox is never reused.
   */
  async acquire(options?: CreateOptions): Promise<Sandbox> {
    const key = this.#shapeKey(options)
    let matched: SandboxPool | null = null
    for (const pool of this.#pools) {
      if (poolControl.key(pool) !== key) continue
      const sandbox = poolControl.take(pool)
      if (sandbox) return sandbox
      matched ??= pool
    }
    // A member being reset (reuse) is quicker to wait for than a boot.
    const reset = matched && (await poolControl.takeAfterReset(matched))
    if (reset) return reset
    const sandbox = await this.create(options)
    if (matched) await poolControl.adopt(matched, sandbox)
    return sandbox
  }

  /** Every pool of this runtime. */
  get pools(): SandboxPool[] {
    return [...this.#pools]
  }

  #poolOptions(value: unknown, what: string): PoolOptions {
    const o = optionsObject(value, what, [...CREATE_KEYS, ...POOL_KEYS])
    if (o.size === undefined) throw errors.badArgument({ subject: `${what}`, problem: 'needs a size' })
    intInRange(o.size, `${what}.size`, POOL_SIZE.min, POOL_SIZE.max)
    if (o.detached === true)
      throw errors.badArgument({
        subject: `${what}: pooled sandboxes`,
        problem: 'cannot be detached (they die with their host)',
      })
    if (o.name !== undefined)
      throw errors.badArgument({ subject: `${what}: pooled sandboxes`, problem: 'cannot share a name' })
    if (o.signal !== undefined)
      throw errors.badArgument({
        subject: `${what}.signal`,
        problem: 'is not a pool option (a pool boots in the background; close it to stop its boots)',
      })
    if (o.from !== undefined) this.snapshots.resolve(o.from, `${what}.from`)
    if (o.reuse !== undefined && typeof o.reuse !== 'boolean')
      throw errors.badArgument({ subject: `${what}.reuse`, problem: `must be a boolean, got ${describe(o.reuse)}` })
    if (o.reuse === true) {
      // The reset (lib/pool-reset.ts) rebuilds a namespace sandbox's root over its image alone.
      const refused = (['from', 'network', 'artifacts'] as const).find((k) => o[k] !== undefined && o[k] !== null)
      if (refused)
        throw errors.badArgument({
          subject: `${what}.reuse`,
          problem: `cannot be used with ${refused} (a reused sandbox is reset to its image alone)`,
        })
      const driver = o.driver === undefined || o.driver === 'auto' ? null : DRIVERS[o.driver as DriverName]
      if (driver && !driver.capabilities.resetForReuse)
        throw errors.badArgument({
          subject: `${what}.reuse`,
          problem: `cannot reset a sandbox of driver ${describe(o.driver)} (its root is not the host's to rebuild)`,
        })
    }
    return o as unknown as PoolOptions
  }

  /** The options a pool matches on: create options without defaults that change nothing. */
  #shapeKey(options: unknown): string {
    const o = { ...optionsObject(options, 'create options', CREATE_KEYS) }
    delete o.wait
    delete o.signal
    if (o.detached === false) delete o.detached
    if (o.from !== undefined) o.from = this.snapshots.resolve(o.from, 'from').id
    if (o.image === undefined && o.from === undefined) o.image = 'base'
    return JSON.stringify(
      Object.keys(o)
        .sort()
        .filter((k) => o[k] !== undefined)
        .map((k) => [k, o[k]]),
    )
  }

  /** Number of live sandboxes this runtime owns. */
  get liveCount(): number {
    return this.#live.size
  }

  /** Creates a sandbox (lib/create-pipeline.ts: validate → check policy → reserve capacity → boot → handshake). */
  create(options?: CreateOptions): Promise<Sandbox> {
    return createSandbox(this.#createHost(), options)
  }

  /** What the boot pipeline may see and do of this runtime. */
  #createHost(): CreateHost {
    return {
      images: this.images,
      state: this.#state,
      snapshots: this.snapshots,
      defaults: this.#settings.defaults,
      allowlist: this.#settings.allowlist,
      isCustomImage: (name) => this.#settings.customSources.has(name),
      capsOf: (image) => this.#settings.caps[image],
      networkCap: (network) => this.#networkCap(network),
      takeSlot: (signal) => this.#slots.take(signal),
      resolveImage: (name, onProgress) => this.#resolveImage(name, onProgress),
      track: (id, sandbox, release, owned) => void this.#live.set(id, { sandbox, booted: null, release, owned }),
      booted: (id, booted) => {
        const entry = this.#live.get(id)
        if (entry) entry.booted = booted
      },
      release: (id, sandbox) => this.#release(id, sandbox),
      backend: (id, booted, connection, hasArtifacts) => this.#backend(id, booted, connection, hasArtifacts),
    }
  }

  /** A handle on a sandbox created elsewhere (another process or runtime), with its access token. */
  async attach(id: string, options: { accessToken?: string }): Promise<Sandbox> {
    assertString(id, 'sandbox id')
    if (!/^[0-9a-f-]{36}$/.test(id))
      throw errors.badArgument({ subject: `sandbox id ${describe(id)}`, problem: 'is not a UUID' })
    const o = optionsObject(options, 'attach options', ['accessToken'])
    try {
      fs.accessSync(this.#state.sandboxDir(id), fs.constants.R_OK | fs.constants.X_OK)
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EACCES')
        throw errors.accessDenied({ subject: `the state of sandbox ${id}`, problem: 'belongs to another user' })
    }
    const record = this.#state.read(id)
    if (!record || !this.#state.isAlive(record))
      throw errors.noSandbox({ sandboxId: id, where: `live in ${this.#state.root}` })
    if (typeof o.accessToken !== 'string' || o.accessToken.length === 0)
      throw errors.accessDenied({ subject: `attaching to sandbox ${id}`, problem: 'needs its accessToken' })
    if (sha256(o.accessToken) !== record.tokenSha256)
      throw errors.accessDenied({ subject: 'wrong accessToken', problem: `for sandbox ${id}` })
    // The sandbox can replace its socket (ctl/ is shared with it): connect through a descriptor of
    // the socket itself, never through a symlink it may have planted to some other host socket.
    const socket = this.#state.openControlSocket(id)
    let connection: AgentConnection
    try {
      // The agent made the socket: it belongs to the sandbox's root, which is this user or, on a
      // root host, the sandbox id range's root.
      const expected = sandboxIdMapping()?.hostRoot ?? process.getuid?.()
      if (expected !== undefined && socket.uid !== expected) {
        throw errors.accessDenied({
          subject: `the control socket of sandbox ${id}`,
          problem: `belongs to uid ${socket.uid}, not to this user`,
        })
      }
      connection = await AgentConnection.connect(socket.path, { token: o.accessToken })
    } finally {
      socket.close()
    }
    // The deadlines as the agent enforces them now (another client's extendTtl moved them), else as create set them.
    const lifetime = this.#state.activity(id)
    const sandbox = sandboxControl.create(
      {
        ...handleInfo(record),
        expiresAt: lifetime?.expiresAt !== undefined ? lifetime.expiresAt : record.expiresAt,
        idleTimeoutMs: lifetime?.idleTimeoutMs ?? record.idleTimeoutMs,
      },
      null,
    )
    // The image as this runtime has it now, if it is still the version the sandbox booted.
    sandboxControl.useImageManifest(sandbox, () =>
      this.images.resolve(record.image, { policy: 'never' }).then(
        (image) => (image.id === record.imageVersion ? image.manifest : null),
        () => null,
      ),
    )
    sandboxControl.setStatus(sandbox, 'starting')
    sandboxControl.attachBackend(sandbox, this.#remoteBackend(record, connection))
    return sandbox
  }

  /** Live sandboxes in the state directory (any process's), and on request recently ended ones. */
  list(options?: ListOptions): SandboxListing[] {
    const o = optionsObject(options, 'list options', ['includeHistorical', 'metadata'])
    const includeHistorical = optionalBoolean(o.includeHistorical, 'includeHistorical', false)
    const wanted = Object.entries(metadataMap(o.metadata, 'list metadata filter'))
    const matches = (m: Record<string, string> | undefined) => wanted.every(([k, v]) => m?.[k] === v)
    // Entries whose sandbox ended with nobody watching (a detached one's TTL, a crash) move to the history first.
    this.sweep()
    const now = Date.now()
    const out: SandboxListing[] = []
    for (const id of this.#state.ids()) {
      const record = this.#state.read(id)
      if (!record || !this.#state.isAlive(record) || !matches(record.metadata)) continue
      const activity = this.#state.activity(id)
      const local = this.#live.get(id)?.sandbox
      out.push({
        id,
        name: record.name,
        image: record.image,
        ageMs: now - record.createdAt,
        status:
          local?.status ?? (activity?.paused ? 'paused' : activity && activity.activeCommands > 0 ? 'running' : 'idle'),
        execInProgress: local ? local.activeCommands > 0 : (activity?.activeCommands ?? 0) > 0,
        // What the agent enforces now (extendTtl moves it), else what create set.
        expiresAt: activity?.expiresAt !== undefined ? activity.expiresAt : record.expiresAt,
        pooled: local
          ? [...this.#pools].some((p) => poolControl.holds(p, local))
          : fs.existsSync(path.join(this.#state.sandboxDir(id), POOLED_MARKER)),
        metadata: record.metadata,
        network: record.network ?? null,
      })
    }
    if (includeHistorical) {
      for (const h of this.#state.history()) {
        if (!matches(h.metadata)) continue
        const metadata = h.metadata ?? {}
        const artifacts =
          typeof h.artifactsTo === 'string'
            ? { artifacts: readArtifactsRecord(h.artifactsTo, h.id, validDirIdentity(h.artifactsDir)) }
            : {}
        const ending = h.failed
          ? { status: 'failed' as const, error: h.failed }
          : { status: 'destroyed' as const, destroyedReason: h.reason }
        out.push({
          id: h.id,
          name: h.name,
          image: h.image,
          ageMs: now - h.createdAt,
          execInProgress: false,
          expiresAt: null,
          metadata,
          pooled: false,
          ...ending,
          ...artifacts,
        })
      }
    }
    return out
  }

  /** Removes entries whose sandbox process is gone (a crashed or SIGKILLed host leaves them). */
  sweep(): number {
    let swept = 0
    for (const id of this.#state.ids()) {
      if (this.#live.has(id)) continue
      const record = this.#state.read(id)
      if (record && this.#state.isAlive(record)) continue
      if (!record) {
        // No record yet: a create still under way (the record is written once it is up), unless
        // the process that made the entry is gone; an entry without that marker gets MAX_BOOT_MS.
        const creator = this.#state.creatorAlive(id)
        if (creator === true || (creator === null && this.#state.ageMs(id) < MAX_BOOT_MS)) continue
      }
      // A half-made entry's record never listed its cgroups: found by the id too.
      removeCgroupDirsSync([...new Set([...(record?.cgroupDirs ?? []), ...leftoverCgroupDirs(id)])])
      this.#state.retireSync(id, this.#state.exitReason(id) ?? endedWithoutRecord(record))
      swept++
    }
    this.#state.removeStaleReaperFiles()
    this.#state.removeAbandonedTrash()
    return swept
  }

  /** Stops every sandbox this runtime owns. */
  async close(): Promise<void> {
    // Nothing starts after this: creates still queued for a slot would otherwise boot once the
    // stops below free theirs, and outlive the close.
    this.#slots.close()
    // Leased members' stops destroy them from here on; resets under way end first.
    for (const id of [...this.#recyclers.keys()]) this.#sandboxEnded(id)
    await Promise.all(this.#resets)
    await Promise.all([...this.#pools].map((p) => p.close()))
    this.#pools.clear()
    await Promise.all(
      [...this.#live.values()].map(({ sandbox }) =>
        sandbox.status === 'destroyed' || sandbox.status === 'failed' ? null : sandbox.stop().catch(() => {}),
      ),
    )
    await this.#state.settled()
    runtimes.delete(this)
  }

  /** `await using rt = new Runtime()`: close() when the scope ends. */
  async [Symbol.asyncDispose](): Promise<void> {
    await this.close()
  }

  #killOwnedSync(): void {
    for (const [id, { owned, booted }] of this.#live) {
      if (!owned || !booted) continue
      booted.kill()
      // The exit leaves no event loop to finish the asynchronous parts: the blocking forms here.
      // Queued now, finished in Node's teardown (a completion there never throws: native/src/addon/promise_worker.h); never unhandled.
      booted.cleanup().catch(() => {})
      removeCgroupDirsSync(booted.limits.cgroupPaths)
      this.#state.retireSync(id, 'host_exit')
    }
    this.#state.settleSync()
  }

  /** The runtime's side of a network policy: within networkAllowlist (S110). Whether the driver can enforce one at all (S111) is the driver's. */
  #networkCap(network: NetworkPolicy | null): NetworkPolicy | null {
    if (network === null) return null
    const { networkAllowlist } = this.#settings
    if (networkAllowlist === null) return null
    checkAgainstAllowlist(network, networkAllowlist)
    return allowlistPolicy(networkAllowlist)
  }

  /** An image as create() names it (pinned or not, images/pin.ts); without autoInstall nothing is built or pulled (S101). */
  async #resolveImage(image: string, onProgress: ProgressListener): Promise<ResolvedImage> {
    const { customSources, autoInstall } = this.#settings
    const { image: name, version } = splitPin(image)
    const source = customSources.get(name)
    // A customImages name of a reference stands for that reference, pinned versions included.
    if (typeof source === 'string' && looksLikeReference(source) && (version !== null || !autoInstall)) {
      const ref = version === null ? source : `${source}@${version}`
      return { ...(await this.images.resolve(ref, { onProgress, policy: 'never' })), name }
    }
    // A pinned version is in the cache or nowhere: never built nor pulled.
    if (source === undefined || version !== null)
      return this.images.resolve(image, { onProgress, ...(!autoInstall && { policy: 'never' as const }) })
    if (!autoInstall) {
      if (!(await this.images.isRegistered(name)))
        throw errors.imageUnknown({
          subject: `image "${name}" of customImages`,
          problem: 'is not in the cache and autoInstall is false: register it first (images.register)',
        })
      return this.images.resolve(name, { onProgress, policy: 'never' })
    }
    let pending = this.#customImages.get(name)
    if (!pending) {
      pending = this.images.register(name, source, { onProgress })
      this.#customImages.set(name, pending)
      pending.catch(() => this.#customImages.delete(name))
    }
    return pending
  }

  /** sandbox: the handle that ended (a reused sandbox outlives its earlier handles); none: whatever holds it. */
  #release(id: string, sandbox?: Sandbox): void {
    const entry = this.#live.get(id)
    if (!entry) return
    if (sandbox && (entry.sandbox !== sandbox || entry.recycling)) return
    this.#live.delete(id)
    entry.release()
  }

  #backend(id: string, booted: BootedSandbox, connection: AgentConnection, hasArtifacts: boolean): SandboxBackend {
    let destroying = false
    // Handed to a reuse pool: this handle ended, the sandbox lives on under the next one's backend.
    let recycled = false
    let handedOn = (_: DestroyedReason) => {}
    const handed = new Promise<DestroyedReason>((resolve) => (handedOn = resolve))
    const finish = async (reason: DestroyedReason) => {
      connection.close(
        reason === 'user_killed'
          ? null
          : errors.connectionLost({
              subject: `sandbox ${id}`,
              problem: `ended (${reason}) while requests were in flight`,
            }),
      )
      // Never rejects: `ended` has no caller when the sandbox ends by itself, and a rejection
      // there would be unhandled (the host process dies). What cannot be removed now, the next sweep removes.
      await booted.cleanup().catch(() => {})
      await this.#state.retire(id, reason).catch(() => {})
      return reason
    }
    const exited = this.#whenExited(booted, () => {
      if (recycled) return 'user_killed' as const
      this.#sandboxEnded(id)
      return destroying ? 'user_killed' : finish(this.#state.exitReason(id) ?? 'crashed')
    })
    const ended = Promise.race([exited, handed])
    // The connection is what keeps a script alive while its sandbox lives. Once it closes (the
    // sandbox ending by itself: idle timeout, ttl, a crash) the end still has steps (the exit's
    // report, cleanup, retiring the entry): the event loop stays alive until they are done, not
    // left to end half way through them.
    connection.once('closed', () => {
      const hold = setInterval(() => {}, 1000)
      void ended.finally(() => clearInterval(hold))
    })
    return {
      connection,
      ended,
      destroy: async (reason) => {
        const recycler = reason === 'user_killed' ? this.#recyclers.get(id) : undefined
        if (recycler && !recycled) {
          recycled = true
          connection.close(null)
          handedOn('user_killed')
          this.#recycle(id, booted, recycler)
          return
        }
        destroying = true
        this.#sandboxEnded(id)
        await this.#shutdown(connection, booted.exited, () => booted.kill(), reason, exitGrace(hasArtifacts))
        await finish(reason)
      },
    }
  }

  /**
   * Runs onExit when the sandbox process exits, unless a later backend of the same process (a reused
   * sandbox's next handle) asked first: one watcher per process, so the ended handles of a sandbox
   * reused a thousand times are not kept alive by a thousand callbacks on its exit.
   */
  #whenExited(
    booted: BootedSandbox,
    onExit: () => DestroyedReason | Promise<DestroyedReason>,
  ): Promise<DestroyedReason> {
    let watcher = this.#exitWatchers.get(booted)
    if (!watcher) {
      const created: { current: (() => void) | null } = { current: null }
      void booted.exited.then(() => created.current?.())
      this.#exitWatchers.set(booted, (watcher = created))
    }
    const w = watcher
    return new Promise((resolve) => {
      w.current = () => resolve(onExit())
    })
  }

  /** Whether sb's stop could reset it: without root, krunbox-reset cannot clone the image's mount (open_tree needs CAP_SYS_ADMIN over the host's mount namespace), so every reset would fail. */
  #canReset(sb: Sandbox): boolean {
    return DRIVERS[sb.driver].capabilities.resetForReuse && process.getuid?.() === 0
  }

  /** Before a reuse member's first lease: what its resets restore the agent to (lib/pool-reset.ts). */
  async #recordForReuse(sb: Sandbox): Promise<void> {
    const entry = this.#live.get(sb.id)
    if (!entry?.booted || entry.initState !== undefined || !this.#canReset(sb)) return
    entry.initState = await recordInitState(entry.booted.pid).catch(() => undefined)
  }

  /** A leased member's holder stops it: hand it to the pool through a reset instead of destroying it (lib/pool-reset.ts). */
  #recycleOnStop(sb: Sandbox, upperMb: number, done: Recycler['done']): RecycleTicket {
    const ticket: RecycleTicket = { started: false, onStart: () => {} }
    const entry = this.#live.get(sb.id)
    // Nothing to reset it with (no record of its agent either): its stop() destroys it (and the sandbox's end tells the pool).
    if (!this.#canReset(sb) || !sb.accessToken || !entry?.booted || entry.initState === undefined) {
      void sb.once('destroyed', () => done(null, false))
      return ticket
    }
    this.#recyclers.set(sb.id, {
      upperMb,
      done,
      ticket,
      spare: openSpare(entry.booted.socketPath, sb.accessToken),
    })
    return ticket
  }

  /** The sandbox ends without a reset: a pool waiting for it hears so. */
  #sandboxEnded(id: string): void {
    const recycler = this.#recyclers.get(id)
    if (!recycler) return
    this.#recyclers.delete(id)
    void recycler.spare.then(
      (c) => c.close(),
      () => {},
    )
    recycler.done(null, false)
  }

  #resetImage(name: string, version: string): Promise<ResolvedImage> {
    const key = `${name}\0${version}`
    let image = this.#resetImages.get(key)
    if (!image) {
      image = this.images.resolve(name, { policy: 'never' }).then((resolved) => {
        if (resolved.id !== version) throw new Error(`image ${name} is now ${resolved.id}, not ${version}`)
        return resolved
      })
      image.catch(() => this.#resetImages.delete(key))
      this.#resetImages.set(key, image)
    }
    return image
  }

  #recycle(id: string, booted: BootedSandbox, recycler: Recycler): void {
    const entry = this.#live.get(id)
    if (!entry?.sandbox) return this.#sandboxEnded(id)
    this.#recyclers.delete(id)
    entry.recycling = true
    recycler.ticket.started = true
    recycler.ticket.onStart()
    const work = (async () => {
      try {
        const record = this.#state.read(id)
        if (!record) throw new Error('no record')
        const image = await this.#resetImage(record.image, record.imageVersion)
        const done = await resetSandbox(
          {
            pid: booted.pid,
            spare: recycler.spare,
            imageRootfs: image.rootfs,
            upperMb: recycler.upperMb,
            initState: entry.initState!,
          },
          (tokenSha256) => this.#state.write({ ...record, tokenSha256 }),
        )
        const next = sandboxControl.create({ ...handleInfo(record), network: null }, done.token)
        sandboxControl.useImageManifest(next, () => Promise.resolve(image.manifest))
        sandboxControl.setStatus(next, 'starting')
        entry.sandbox = next
        entry.recycling = false
        next.once('destroyed', () => this.#release(id, next))
        sandboxControl.attachBackend(next, this.#backend(id, booted, done.connection, false))
        recycler.done(next, false, done.ms)
      } catch {
        // Fail closed: the sandbox goes, whatever step failed.
        booted.kill()
        await booted.exited
        await booted.cleanup().catch(() => {})
        await this.#state.retire(id, 'user_killed').catch(() => {})
        entry.recycling = false
        this.#release(id)
        recycler.done(null, true)
      }
    })()
    this.#resets.add(work)
    void work.finally(() => this.#resets.delete(work))
  }

  /** Asks the agent to end, waits a grace period for the process, then kills it. */
  async #shutdown(
    connection: AgentConnection,
    exited: Promise<unknown>,
    kill: () => void,
    reason: DestroyedReason,
    exitGraceMs: number,
  ): Promise<void> {
    // Keep the event loop alive until the sandbox is gone: a script whose last act is
    // `await sb.stop()` must not exit half way through it.
    const keepAlive = setInterval(() => {}, 1000)
    try {
      const asked = connection.call('sandbox.shutdown', { reason }).then(
        () => true,
        () => false,
      )
      const answered = await Promise.race([asked, delay(STOP_GRACE_MS).then(() => false)])
      // An agent that never got the request (its connection is gone) is not ending: no grace to wait.
      const gone = answered && (await Promise.race([exited.then(() => true), delay(exitGraceMs).then(() => false)]))
      if (!gone) {
        kill()
        await exited
      }
    } finally {
      clearInterval(keepAlive)
    }
  }

  #remoteBackend(record: SandboxRecord, connection: AgentConnection): SandboxBackend {
    const alive = () => this.#state.isAlive(record)
    const gone = async () => {
      while (alive()) await delay(20)
    }
    const ended = new Promise<DestroyedReason>((resolve) =>
      connection.once('closed', () => resolve(gone().then(() => this.#state.exitReason(record.id) ?? 'crashed'))),
    )
    const kill = () => {
      if (alive()) process.kill(record.pid, 'SIGKILL')
    }
    return {
      connection,
      ended,
      destroy: async (reason) => {
        await this.#shutdown(connection, gone(), kill, reason, exitGrace(Boolean(record.artifacts)))
        connection.close()
        await removeCgroupDirs(record.cgroupDirs)
        await this.#state.retire(record.id, reason)
      },
    }
  }
}

/**
 * Why a sandbox ended when its agent left no exit record: an attached sandbox dies with its host
 * (host_exit) once that host is gone; otherwise (detached, or a living host) it crashed.
 */
/** What a handle of an existing sandbox (attach, a reused pool member) starts from: its record. */
function handleInfo(record: SandboxRecord): SandboxInfo {
  return {
    id: record.id,
    name: record.name,
    image: record.image,
    imageVersion: record.imageVersion,
    driver: record.driver,
    metadata: record.metadata,
    env: record.env,
    expiresAt: record.expiresAt,
    idleTimeoutMs: record.idleTimeoutMs,
    network: record.network ?? null,
  }
}

function endedWithoutRecord(record: SandboxRecord | null): DestroyedReason {
  if (record && !record.detached && processStartTime(record.ownerPid) === null) return 'host_exit'
  return 'crashed'
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref())
}

let defaultRuntime: Runtime | null = null
/** The runtime Sandbox.create() and Sandbox.attach() use: one per process, default configuration, made on first use. */
export function getDefaultRuntime(): Runtime {
  defaultRuntime ??= new Runtime()
  return defaultRuntime
}
registerDefaultRuntime(getDefaultRuntime)
export type { DriverName }

/** How long a stopped sandbox has to end before it is killed (archiving artifacts takes longer). */
function exitGrace(hasArtifacts: boolean): number {
  return hasArtifacts ? ARTIFACTS_STOP_GRACE_MS : STOP_GRACE_MS
}
