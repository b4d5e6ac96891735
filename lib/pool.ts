/**
 * A warm pool: `size` sandboxes of one shape booted ahead of time, handed out by Runtime.acquire()
 * at once. A member leaves the pool synchronously when it is taken (so it is never handed out
 * twice) and is never taken back: stop() discards it, as it discards any sandbox, unless the pool
 * has `reuse`, whose members come back through a reset as new handles (lib/pool-reset.ts). The pool
 * refills in the background, never on the caller's path, from the moment a member is taken, as
 * hard as it measures the demand and the host's create rate (lib/pool-refill.ts): members ready
 * or booting between `size` and `maxSize`, boots at once adapted to what the host delivers (at
 * most `refillConcurrency`), only while the runtime has a free slot under its caps, and backs
 * off when boots fail. Members are ordinary
 * owned sandboxes: they count against every cap and die with the host like any other.
 * A waiting member has a `pooled` file in its state directory, written before it is offered, so
 * that list() in another process sees it as pooled (removed, without waiting, when it is leased).
 */
import { EventEmitter } from 'node:events'
import fsp from 'node:fs/promises'
import path from 'node:path'
import { SandboxError } from './errors.js'
import { DISK_MB, POOL_MAX_BACKOFF_MS, POOL_REFILL_CONCURRENCY, POOL_REFILL_PER_SECOND, POOL_SIZE } from './defaults.js'
import { intInRange } from './options.js'
import { defaultMaxRefillConcurrency, RefillPlanner } from './pool-refill.js'
import type { CreateOptions } from './create-options.js'
import type { Sandbox } from './sandbox.js'
import { CODE_LANGUAGES, type CodeLanguage } from './code/types.js'
import { errors } from './protocol/errors.gen.js'

/** A pool boots in the background, so it takes no signal: close() ends its boots. */
export interface PoolOptions extends Omit<CreateOptions, 'signal'> {
  /** Ready sandboxes to keep at least. */
  size: number
  /** Members (ready or booting) a measured demand may grow the pool to (default: size, a fixed pool). */
  maxSize?: number
  /** Boots in flight at once at most; the pool adapts below it to what the host delivers (default twice the cores). */
  refillConcurrency?: number
  /** Boots started per second at most (default: no bound but the concurrency). */
  refillPerSecond?: number
  /**
   * A leased member's stop() hands it back to the pool, which resets it (lib/pool-reset.ts: every
   * process, file, IPC object and socket of the lease gone, a new token) and offers it to the next
   * acquire as a new handle; a failed reset destroys it. Namespace driver only; not with `from`,
   * `network` or `artifacts` (S001). A sandbox the auto driver choice boots under krun, or any on a
   * host where krunbox does not run as root, is destroyed at its stop, as without reuse.
   */
  reuse?: boolean
  /** Leases one member serves at most before it is destroyed (default 100). */
  maxReuses?: number
  /**
   * Languages whose default code context every member starts before it is offered, so that the
   * first runCode of a lease does not wait for a kernel (with reuse, again after every reset,
   * which ends the last lease's kernels). A member whose kernel cannot start is not offered.
   */
  startKernels?: CodeLanguage[]
}

export interface PoolStats {
  size: number
  ready: number
  booting: number
  leased: number
  /** Members that ended while waiting in the pool (crash, idle timeout, TTL). */
  lost: number
  bootFailures: number
  /** Acquires served by a ready member. */
  hits: number
  /** Acquires of this pool's shape that found it empty and fell back to a create. */
  fallbacks: number
  /** Acquires per second over the last 2 s (hits and fallbacks). */
  demandPerSecond: number
  /** Boots per second the host delivered to this pool at its current concurrency (0 before any boot). */
  createPerSecond: number
  /** Boots the pool runs at once now (adapted, at most refillConcurrency). */
  refillConcurrency: number
  /** Members (ready or booting) the pool aims at now: between size and maxSize, from the demand. */
  target: number
  /** Leased members handed back to the pool after a reset (`reuse`). */
  reuses: number
  /** Resets that failed: those members were destroyed. */
  resetFailures: number
  /** A validation or configuration error of the pool's shape: the pool stopped refilling. */
  error: SandboxError | null
}

/** What a pool needs from its runtime. */
export interface PoolHost {
  /** Boots a member. */
  create(options: CreateOptions): Promise<Sandbox>
  /** Whether a sandbox could be created now without waiting or hitting a cap. */
  hasFreeSlot(): boolean
  /** The sandbox's state directory (for its `pooled` marker). */
  sandboxDir(sb: Sandbox): string
  /**
   * Before sb's first lease in a reuse pool: records what each of its resets gives its agent back
   * (lib/pool-reset.ts recordInitState). Never rejects; one it could not record is destroyed at its stop.
   */
  recordForReuse(sb: Sandbox): Promise<void>
  /** When the holder stops sb, reset it for the next lease instead (done: its new handle, or null when it ended). */
  recycleOnStop(
    sb: Sandbox,
    upperMb: number,
    done: (next: Sandbox | null, resetFailed: boolean, resetMs?: number) => void,
  ): RecycleTicket
}

/** A leased member's way back: the runtime calls onStart when its reset begins (started: it did). */
export interface RecycleTicket {
  started: boolean
  onStart: () => void
}

interface Member {
  sandbox: Sandbox
  readyAt: number
}

/** The file in a sandbox's state directory that says it waits in a pool. */
export const POOLED_MARKER = 'pooled'

export const POOL_KEYS = [
  'size',
  'maxSize',
  'refillConcurrency',
  'refillPerSecond',
  'reuse',
  'maxReuses',
  'startKernels',
] as const

/** The create options of a pool's members: its options without the pool's own (POOL_KEYS). */
export function poolShape(options: PoolOptions): Omit<PoolOptions, (typeof POOL_KEYS)[number]> {
  const shape: Record<string, unknown> = { ...options }
  for (const key of POOL_KEYS) delete shape[key]
  return shape as Omit<PoolOptions, (typeof POOL_KEYS)[number]>
}

/**
 * What the runtime does to its pools and a caller must not. Exported from this module, never
 * from lib/index.ts.
 */
export interface PoolControl {
  create(host: PoolHost, options: PoolOptions, key: string): SandboxPool
  /** The shape key acquire() matches on. */
  key(pool: SandboxPool): string
  /** Whether sb is waiting in this pool (not leased). */
  holds(pool: SandboxPool, sb: Sandbox): boolean
  /** Takes a ready member, synchronously, or undefined. Refilling starts in the background. */
  take(pool: SandboxPool): Sandbox | undefined
  /**
   * After take() found none: a member being reset (reuse), waited for while that is quicker than
   * a boot (at most the boot latency the pool measured), or undefined: create one.
   */
  takeAfterReset(pool: SandboxPool): Promise<Sandbox | undefined>
  /** Schedules a refill pass (the runtime calls it when a slot frees). */
  refill(pool: SandboxPool): void
  /**
   * sb was created for an acquire that found the pool empty: a reuse pool with room takes it in at its
   * stop. Resolves (never rejects) before the acquire may hand sb out: its record comes first.
   */
  adopt(pool: SandboxPool, sb: Sandbox): Promise<void>
}
let control!: PoolControl

export interface PoolEvents {
  /** A member is ready in the pool. */
  member: [sandbox: Sandbox]
  /** A member ended while waiting in the pool (it is replaced). */
  lost: [sandbox: Sandbox]
  /** A leased member was reset and waits in the pool again (`reuse`), after resetMs. */
  reused: [sandbox: Sandbox, resetMs: number]
  /** The ready members reached the pool's target again (after leases, losses or a resize). */
  refilled: [stats: PoolStats]
  closed: []
}

export class SandboxPool extends EventEmitter<PoolEvents> {
  /** The create options every member is booted with (the pool's shape). */
  readonly shape: CreateOptions
  readonly #key: string
  readonly #host: PoolHost
  #size: number
  #maxSize: number
  readonly #perSecond: number | null
  readonly #planner: RefillPlanner
  readonly #ready: Member[] = []
  /** Boots and what follows them (marker, stop of a surplus member): close() waits for them. */
  readonly #booting = new Set<Promise<void>>()
  /** Boots not yet offered (create, then the marker): what the refill and stats count as booting. */
  #creating = 0
  #closed = false
  #leased = 0
  #lost = 0
  #hits = 0
  #fallbacks = 0
  #bootFailures = 0
  #fatal: SandboxError | null = null
  #failuresInARow = 0
  #lastStarts: number[] = []
  #timer: NodeJS.Timeout | null = null
  #scheduled = false
  readonly #reuse: boolean
  readonly #maxReuses: number
  /** Leases each member served (carried from one handle of a sandbox to the next). */
  readonly #uses = new WeakMap<Sandbox, number>()
  /** Leased members that come back after their stop (reuse): counted like boots by the refill. */
  #outstanding = 0
  /** Of those, members stopped and being reset now. */
  #resetting = 0
  /** Acquires waiting for a member being reset (#takeAfterReset), woken when one is offered. */
  readonly #offerWaiters = new Set<() => void>()
  #reuses = 0
  #resetFailures = 0
  /** The languages whose default context each member starts before it is offered. */
  readonly #kernels: CodeLanguage[]

  static {
    control = {
      create: (host, options, key) => new this(host, options, key),
      key: (pool) => pool.#key,
      holds: (pool, sb) => pool.#holds(sb),
      take: (pool) => pool.#take(),
      takeAfterReset: (pool) => pool.#takeAfterReset(),
      refill: (pool) => pool.#refill(),
      adopt: (pool, sb) => pool.#adopt(sb),
    }
  }

  /** Use runtime.pool() or RuntimeConfig.pools. */
  private constructor(host: PoolHost, options: PoolOptions, key: string) {
    super()
    this.#host = host
    this.#size = intInRange(options.size, 'pool size', POOL_SIZE.min, POOL_SIZE.max)
    this.#maxSize = intInRange(options.maxSize, 'maxSize', this.#size, POOL_SIZE.max, this.#size)
    const maxConcurrency = Math.min(POOL_REFILL_CONCURRENCY.max, defaultMaxRefillConcurrency())
    this.#planner = new RefillPlanner(
      intInRange(
        options.refillConcurrency,
        'refillConcurrency',
        POOL_REFILL_CONCURRENCY.min,
        POOL_REFILL_CONCURRENCY.max,
        maxConcurrency,
      ),
    )
    this.#perSecond =
      options.refillPerSecond === undefined
        ? null
        : intInRange(options.refillPerSecond, 'refillPerSecond', POOL_REFILL_PER_SECOND.min, POOL_REFILL_PER_SECOND.max)
    // reuse is a boolean here: Runtime.pool() refused anything else (S001 naming it).
    this.#reuse = options.reuse === true
    this.#maxReuses = intInRange(options.maxReuses, 'maxReuses', 1, POOL_MAX_REUSES, 100)
    this.#kernels = kernelLanguages(options.startKernels)
    this.shape = { ...poolShape(options), wait: true, detached: false }
    this.#key = key
    this.#refill()
  }

  get size(): number {
    return this.#size
  }

  get stats(): PoolStats {
    return {
      size: this.#size,
      ready: this.#ready.length,
      booting: this.#creating,
      leased: this.#leased,
      lost: this.#lost,
      bootFailures: this.#bootFailures,
      hits: this.#hits,
      fallbacks: this.#fallbacks,
      demandPerSecond: this.#planner.demandPerSecond(),
      createPerSecond: this.#planner.createPerSecond(),
      refillConcurrency: this.#planner.concurrency,
      target: this.#target(),
      reuses: this.#reuses,
      resetFailures: this.#resetFailures,
      error: this.#fatal,
    }
  }

  /** Resolves once `size` members are ready (at once if they are). */
  full(): Promise<void> {
    return new Promise((resolve) => {
      const check = () => {
        if (this.#ready.length < this.#size && !this.#closed) return
        this.removeListener('member', check)
        resolve()
      }
      this.on('member', check)
      check()
    })
  }

  #holds(sb: Sandbox): boolean {
    return this.#ready.some((m) => m.sandbox === sb)
  }

  #take(waited = false): Sandbox | undefined {
    if (!waited) this.#planner.recordAcquire()
    const idleLimit = (m: Member) => m.sandbox.idleTimeoutMs > 0 && Date.now() - m.readyAt > m.sandbox.idleTimeoutMs / 2
    while (this.#ready.length > 0) {
      const member = this.#ready.shift()!
      // A member past half its idle timeout would end soon after the lease: replaced instead.
      if (idleLimit(member) || !isUsable(member.sandbox)) {
        this.#discard(member.sandbox)
        continue
      }
      if (waited) this.#fallbacks-- // counted as one when take() found none
      this.#leased++
      this.#hits++
      if (this.#reuse) this.#lendOut(member.sandbox)
      void fsp.rm(this.#marker(member.sandbox), { force: true }).catch(() => {})
      this.#refill()
      return member.sandbox
    }
    if (!waited) this.#fallbacks++
    this.#refill()
    return undefined
  }

  async #takeAfterReset(): Promise<Sandbox | undefined> {
    const deadline = performance.now() + (this.#planner.bootLatencyMs() ?? RESET_WAIT_UNMEASURED_MS)
    while (this.#resetting > 0 && !this.#closed) {
      const left = deadline - performance.now()
      if (left <= 0) return undefined
      let timer: NodeJS.Timeout | undefined
      let wake!: () => void
      await new Promise<void>((resolve) => {
        wake = resolve
        timer = setTimeout(resolve, left)
        this.#offerWaiters.add(resolve)
      })
      // Not a listener of the public 'member' event: one left by each wait that timed out would pile up.
      this.#offerWaiters.delete(wake)
      clearTimeout(timer)
      if (this.#ready.length > 0) {
        const sb = this.#take(true)
        if (sb) return sb
      }
    }
    return undefined
  }

  /** Sets the ready members to keep and the most a demand may grow them to (default: size, fixed); extra ones are stopped at once. */
  async resize(size: number, maxSize?: number): Promise<void> {
    const min = intInRange(size, 'pool size', POOL_SIZE.min, POOL_SIZE.max)
    this.#maxSize = intInRange(maxSize, 'maxSize', min, POOL_SIZE.max, min)
    this.#size = min
    const extra = this.#ready.splice(this.#size)
    await Promise.all(extra.map((m) => stopQuietly(m.sandbox)))
    this.#refill()
  }

  /** Stops every member still in the pool (leased ones are the caller's) and refills no more. */
  async close(): Promise<void> {
    this.#closed = true
    if (this.#timer) clearTimeout(this.#timer)
    this.#timer = null
    const members = this.#ready.splice(0)
    await Promise.all([...members.map((m) => stopQuietly(m.sandbox)), ...this.#booting])
    this.emit('closed')
  }

  /** Members to keep ready or booting now. */
  #target(): number {
    return this.#planner.target(this.#size, this.#maxSize)
  }

  /** Schedules a refill pass on the next turn of the event loop (never on the caller's path). */
  #refill(): void {
    if (this.#closed || this.#scheduled) return
    this.#scheduled = true
    setImmediate(() => {
      this.#scheduled = false
      this.#fill()
    })
  }

  #fill(): void {
    if (this.#closed || this.#timer || this.#fatal) return
    const target = this.#target()
    while (
      this.#ready.length + this.#creating + this.#outstanding < target &&
      this.#creating < this.#planner.concurrency
    ) {
      if (!this.#host.hasFreeSlot()) return // the runtime calls refill() when a slot frees
      const wait = this.#waitBeforeStart()
      if (wait > 0) {
        this.#timer = setTimeout(() => {
          this.#timer = null
          this.#fill()
        }, wait)
        this.#timer.unref()
        return
      }
      this.#lastStarts.push(Date.now())
      const boot = this.#boot()
      this.#booting.add(boot)
      void boot.finally(() => {
        this.#booting.delete(boot)
        this.#refill()
      })
    }
  }

  /** Milliseconds to wait before the next start: the rate bound, and a backoff after failures. */
  #waitBeforeStart(): number {
    const now = Date.now()
    this.#lastStarts = this.#lastStarts.filter((t) => now - t < 1000)
    const rateWait =
      this.#perSecond !== null && this.#lastStarts.length >= this.#perSecond ? 1000 - (now - this.#lastStarts[0]) : 0
    const backoff =
      this.#failuresInARow === 0 ? 0 : Math.min(POOL_MAX_BACKOFF_MS, 100 * 2 ** Math.min(this.#failuresInARow, 10))
    const sinceLast = now - (this.#lastStarts[this.#lastStarts.length - 1] ?? 0)
    return Math.max(rateWait, backoff - sinceLast, 0)
  }

  async #boot(): Promise<void> {
    let sandbox: Sandbox
    const inFlight = ++this.#creating
    const t0 = performance.now()
    try {
      sandbox = await this.#host.create(this.shape)
      this.#planner.recordBoot(performance.now() - t0, inFlight)
    } catch (err) {
      this.#creating--
      // S401: a slot went to someone else meanwhile; the next slot release calls refill().
      if (err instanceof SandboxError && (err.type === 'validation' || err.type === 'config')) {
        this.#fatal = err // retrying cannot help
        return
      }
      if (!(err instanceof SandboxError && err.code === 'S401')) {
        this.#bootFailures++
        this.#failuresInARow++
      }
      return
    }
    this.#failuresInARow = 0
    // What other processes' list() shows, written (through the libuv pool) before the member is
    // offered: a pool that is full here is full for them too. A reuse member's record is made
    // before any lease can change what it records.
    await Promise.all([
      fsp.writeFile(this.#marker(sandbox), '', { mode: 0o644 }).catch(() => {}),
      this.#reuse ? this.#host.recordForReuse(sandbox) : undefined,
    ])
    const warm = await this.#startKernels(sandbox)
    // Booting until offered: a refill pass during the marker's write must not start its replacement.
    this.#creating--
    if (!warm || this.#closed || this.#ready.length >= this.#maxSize) {
      await stopQuietly(sandbox)
      return
    }
    this.#offer(sandbox)
  }

  /** A fallback create becomes a member at its stop while the pool has room (up to maxSize): the boot is not wasted. */
  async #adopt(sandbox: Sandbox): Promise<void> {
    const room = () => !this.#closed && this.#ready.length + this.#creating + this.#outstanding < this.#maxSize
    if (!this.#reuse || !room()) return
    await this.#host.recordForReuse(sandbox)
    if (room()) this.#lendOut(sandbox)
  }

  /** A reuse member's stop comes back here through the runtime's reset. */
  #lendOut(sandbox: Sandbox): void {
    const uses = (this.#uses.get(sandbox) ?? 0) + 1
    this.#outstanding++
    const upperMb = this.shape.diskMb ?? DISK_MB.default
    const recycling = this.#host.recycleOnStop(sandbox, upperMb, (next, failed, resetMs) => {
      if (recycling.started) this.#resetting--
      if (failed) this.#resetFailures++
      // Counted until it is offered (or discarded): a refill meanwhile must not boot its replacement.
      void (next ? this.#returned(next, uses, resetMs ?? 0) : Promise.resolve()).finally(() => {
        this.#outstanding--
        this.#refill()
      })
    })
    recycling.onStart = () => this.#resetting++
  }

  async #returned(sandbox: Sandbox, uses: number, resetMs: number): Promise<void> {
    this.#uses.set(sandbox, uses)
    const expiring = sandbox.expiresAt !== null && sandbox.expiresAt - Date.now() < POOL_TTL_MARGIN_MS
    if (this.#closed || uses >= this.#maxReuses || expiring || this.#ready.length >= this.#maxSize) {
      await stopQuietly(sandbox)
      return
    }
    this.#reuses++
    const [warm] = await Promise.all([
      this.#startKernels(sandbox),
      fsp.writeFile(this.#marker(sandbox), '', { mode: 0o644 }).catch(() => {}),
    ])
    if (this.#closed || !warm) return void (await stopQuietly(sandbox))
    this.emit('reused', sandbox, resetMs)
    this.#offer(sandbox)
  }

  /**
   * Starts the member's default kernels (startKernels) with an empty cell each. False when one
   * cannot start: a boot failure, or the pool's error when the image has no such kernel (S224).
   */
  async #startKernels(sandbox: Sandbox): Promise<boolean> {
    try {
      for (const language of this.#kernels) await sandbox.runCode('', { language })
      return true
    } catch (err) {
      if (err instanceof SandboxError && err.code === 'S224') this.#fatal = err
      else this.#bootFailures++
      return false
    }
  }

  /** sandbox waits in the pool, ready for an acquire. */
  #offer(sandbox: Sandbox): void {
    this.#ready.push({ sandbox, readyAt: Date.now() })
    for (const wake of this.#offerWaiters) wake()
    this.#offerWaiters.clear()
    this.emit('member', sandbox)
    if (this.#ready.length >= Math.max(this.#size, this.#target())) this.emit('refilled', this.stats)
    sandbox.once('destroyed', () => {
      const i = this.#ready.findIndex((m) => m.sandbox === sandbox)
      if (i < 0) return // leased: no longer the pool's
      this.#ready.splice(i, 1)
      this.#lost++
      this.emit('lost', sandbox)
      this.#refill()
    })
  }

  #marker(sandbox: Sandbox): string {
    return path.join(this.#host.sandboxDir(sandbox), POOLED_MARKER)
  }

  #discard(sandbox: Sandbox): void {
    this.#lost++
    void stopQuietly(sandbox)
  }
}

/** Leases one member may serve at most (maxReuses). */
const POOL_MAX_REUSES = 1_000_000
/** How long an acquire waits for a member being reset before any boot was measured (ms). */
const RESET_WAIT_UNMEASURED_MS = 200
/** A returned member whose TTL ends within this is destroyed rather than offered. */
const POOL_TTL_MARGIN_MS = 10_000

/** Ready to lease: `running` too, for a member whose kernels (startKernels) run. */
function isUsable(sb: Sandbox): boolean {
  return sb.status === 'ready' || sb.status === 'idle' || sb.status === 'running'
}

function kernelLanguages(value: unknown): CodeLanguage[] {
  if (value === undefined) return []
  if (!Array.isArray(value) || value.some((l) => !CODE_LANGUAGES.includes(l as CodeLanguage)))
    throw errors.badArgument({
      subject: 'startKernels',
      problem: `must be an array of ${CODE_LANGUAGES.join(', ')}, got ${JSON.stringify(value)?.slice(0, 100)}`,
    })
  return [...new Set(value as CodeLanguage[])]
}

function stopQuietly(sb: Sandbox): Promise<void> {
  if (sb.status === 'destroyed' || sb.status === 'failed') return Promise.resolve()
  return sb.stop().then(
    () => {},
    () => {},
  )
}

export { control as poolControl }
