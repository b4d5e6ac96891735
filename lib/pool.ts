/**
 * A warm pool: `size` sandboxes of one shape booted ahead of time, handed out by Runtime.acquire()
 * at once. A member leaves the pool synchronously when it is taken (so it is never handed out
 * twice) and is never taken back: stop() discards it, as it discards any sandbox. The pool
 * refills in the background, never on the caller's path, at a bounded rate (at most
 * `refillConcurrency` boots at a time and `refillPerSecond` starts per second), only while the
 * runtime has a free slot under its caps, and backs off when boots fail. Members are ordinary
 * owned sandboxes: they count against every cap and die with the host like any other.
 * A waiting member has a `pooled` file in its state directory, written before it is offered, so
 * that list() in another process sees it as pooled (removed, without waiting, when it is leased).
 */
import { EventEmitter } from 'node:events'
import fsp from 'node:fs/promises'
import path from 'node:path'
import { SandboxError } from './errors.js'
import { POOL_MAX_BACKOFF_MS, POOL_REFILL_AFTER_LEASE_MS, POOL_REFILL_CONCURRENCY, POOL_REFILL_PER_SECOND, POOL_SIZE } from './defaults.js'
import { intInRange } from './options.js'
import type { CreateOptions } from './runtime.js'
import type { Sandbox } from './sandbox.js'

/** A pool boots in the background, so it takes no signal: close() ends its boots. */
export interface PoolOptions extends Omit<CreateOptions, 'signal'> {
  /** Ready sandboxes to keep. */
  size: number
  /** Boots in flight at once (default 2: POOL_REFILL_CONCURRENCY in lib/defaults.ts). */
  refillConcurrency?: number
  /** Boots started per second at most (default 20: POOL_REFILL_PER_SECOND). */
  refillPerSecond?: number
}

export interface PoolStats {
  size: number
  ready: number
  booting: number
  leased: number
  /** Members that ended while waiting in the pool (crash, idle timeout, TTL). */
  lost: number
  bootFailures: number
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
}

interface Member {
  sandbox: Sandbox
  readyAt: number
}

/** The file in a sandbox's state directory that says it waits in a pool. */
export const POOLED_MARKER = 'pooled'

export const POOL_KEYS = ['size', 'refillConcurrency', 'refillPerSecond'] as const

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
  /** Schedules a refill pass (the runtime calls it when a slot frees). */
  refill(pool: SandboxPool): void
}
let control!: PoolControl

export interface PoolEvents {
  /** A member is ready in the pool. */
  member: [sandbox: Sandbox]
  /** A member ended while waiting in the pool (it is replaced). */
  lost: [sandbox: Sandbox]
  closed: []
}

export class SandboxPool extends EventEmitter<PoolEvents> {
  /** The create options every member is booted with (the pool's shape). */
  readonly shape: CreateOptions
  readonly #key: string
  readonly #host: PoolHost
  #size: number
  readonly #concurrency: number
  readonly #perSecond: number
  readonly #ready: Member[] = []
  readonly #booting = new Set<Promise<void>>()
  #closed = false
  #leased = 0
  #lost = 0
  #bootFailures = 0
  #fatal: SandboxError | null = null
  #failuresInARow = 0
  #lastStarts: number[] = []
  #timer: NodeJS.Timeout | null = null
  #scheduled = false

  static {
    control = {
      create: (host, options, key) => new this(host, options, key),
      key: (pool) => pool.#key,
      holds: (pool, sb) => pool.#holds(sb),
      take: (pool) => pool.#take(),
      refill: (pool) => pool.#refill(),
    }
  }

  /** Use runtime.pool() or RuntimeConfig.pools. */
  private constructor(host: PoolHost, options: PoolOptions, key: string) {
    super()
    this.#host = host
    this.#size = intInRange(options.size, 'pool size', POOL_SIZE.min, POOL_SIZE.max)
    this.#concurrency = intInRange(options.refillConcurrency, 'refillConcurrency', POOL_REFILL_CONCURRENCY.min, POOL_REFILL_CONCURRENCY.max, POOL_REFILL_CONCURRENCY.default)
    this.#perSecond = intInRange(options.refillPerSecond, 'refillPerSecond', POOL_REFILL_PER_SECOND.min, POOL_REFILL_PER_SECOND.max, POOL_REFILL_PER_SECOND.default)
    const { size: _s, refillConcurrency: _c, refillPerSecond: _p, ...shape } = options
    this.shape = { ...shape, wait: true, detached: false }
    this.#key = key
    this.#refill()
  }

  get size(): number {
    return this.#size
  }

  get stats(): PoolStats {
    return { size: this.#size, ready: this.#ready.length, booting: this.#booting.size, leased: this.#leased, lost: this.#lost, bootFailures: this.#bootFailures, error: this.#fatal }
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

  #take(): Sandbox | undefined {
    const idleLimit = (m: Member) => m.sandbox.idleTimeoutMs > 0 && Date.now() - m.readyAt > m.sandbox.idleTimeoutMs / 2
    while (this.#ready.length > 0) {
      const member = this.#ready.shift()!
      // A member past half its idle timeout would end soon after the lease: replaced instead.
      if (idleLimit(member) || !isUsable(member.sandbox)) {
        this.#discard(member.sandbox)
        continue
      }
      this.#leased++
      void fsp.rm(this.#marker(member.sandbox), { force: true }).catch(() => {})
      this.#refill(POOL_REFILL_AFTER_LEASE_MS)
      return member.sandbox
    }
    this.#refill()
    return undefined
  }

  /** Sets the number of ready members; extra ones are stopped at once. */
  async resize(size: number): Promise<void> {
    this.#size = intInRange(size, 'pool size', POOL_SIZE.min, POOL_SIZE.max)
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

  /** Schedules a refill pass on the next turn of the event loop, or after afterMs (never on the caller's path). */
  #refill(afterMs = 0): void {
    if (this.#closed || this.#scheduled) return
    this.#scheduled = true
    const pass = () => {
      this.#scheduled = false
      this.#fill()
    }
    if (afterMs > 0) setTimeout(pass, afterMs)
    else setImmediate(pass)
  }

  #fill(): void {
    if (this.#closed || this.#timer || this.#fatal) return
    while (this.#ready.length + this.#booting.size < this.#size && this.#booting.size < this.#concurrency) {
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
    const rateWait = this.#lastStarts.length >= this.#perSecond ? 1000 - (now - this.#lastStarts[0]) : 0
    const backoff = this.#failuresInARow === 0 ? 0 : Math.min(POOL_MAX_BACKOFF_MS, 100 * 2 ** Math.min(this.#failuresInARow, 10))
    const sinceLast = now - (this.#lastStarts[this.#lastStarts.length - 1] ?? 0)
    return Math.max(rateWait, backoff - sinceLast, 0)
  }

  async #boot(): Promise<void> {
    let sandbox: Sandbox
    try {
      sandbox = await this.#host.create(this.shape)
    } catch (err) {
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
    // offered: a pool that is full here is full for them too.
    await fsp.writeFile(this.#marker(sandbox), '', { mode: 0o644 }).catch(() => {})
    if (this.#closed || this.#ready.length >= this.#size) {
      await stopQuietly(sandbox)
      return
    }
    this.#ready.push({ sandbox, readyAt: Date.now() })
    this.emit('member', sandbox)
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

function isUsable(sb: Sandbox): boolean {
  return sb.status === 'ready' || sb.status === 'idle'
}

function stopQuietly(sb: Sandbox): Promise<void> {
  if (sb.status === 'destroyed' || sb.status === 'failed') return Promise.resolve()
  return sb.stop().then(() => {}, () => {})
}

export { control as poolControl }
