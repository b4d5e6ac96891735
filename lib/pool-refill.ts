/**
 * How hard a pool refills: from what it measures, not from fixed numbers. Two measurements:
 *  - demand: acquires per second over the last DEMAND_WINDOW_MS (hits and fallbacks alike);
 *  - the host's create rate: for each number of boots run at once (c), a moving average of a
 *    boot's latency, so c boots at once deliver c / latency boots per second.
 * From them: how many boots to run at once (a hill climb: one more while one more delivered
 * more boots per second, one less when one less delivers as many — so a loaded host gets fewer
 * boots, never more than `maxConcurrency`), and how many members to keep ready or booting
 * (enough to cover the demand during one boot, within the pool's min/max).
 */
import os from 'node:os'

/** Acquires counted for the demand (ms). */
const DEMAND_WINDOW_MS = 2000
/** Weight of a new boot latency in its concurrency level's moving average. */
const LATENCY_WEIGHT = 0.3
/** One more boot at once must deliver this much more boots per second to be kept. */
const GAIN_TO_CLIMB = 1.05
/** Every this many boots the level above is measured afresh (the host's load changes). */
const REPROBE_EVERY = 32

/** Boots a pool runs at once at most, by default: twice the cores (a boot also waits on the kernel and the agent's handshake), at least 2. */
export function defaultMaxRefillConcurrency(): number {
  return Math.max(2, 2 * os.availableParallelism())
}

export class RefillPlanner {
  readonly #maxConcurrency: number
  readonly #acquires: number[] = []
  /** Moving average of a boot's latency (ms), by the number of boots in flight when it started. */
  readonly #latency = new Map<number, number>()
  #limit: number
  #boots = 0

  constructor(maxConcurrency: number) {
    this.#maxConcurrency = maxConcurrency
    this.#limit = Math.min(2, maxConcurrency)
  }

  /** An acquire for this pool's shape, served from the pool or not. */
  recordAcquire(now = performance.now()): void {
    this.#acquires.push(now)
    this.#trim(now)
  }

  /** A member's boot took latencyMs while `inFlight` boots (itself included) ran. */
  recordBoot(latencyMs: number, inFlight: number): void {
    const c = Math.max(1, Math.min(inFlight, this.#maxConcurrency))
    const old = this.#latency.get(c)
    this.#latency.set(c, old === undefined ? latencyMs : old + LATENCY_WEIGHT * (latencyMs - old))
    if (++this.#boots % REPROBE_EVERY === 0) this.#latency.delete(this.#limit + 1)
    this.#adapt()
  }

  /** Acquires per second lately. */
  demandPerSecond(now = performance.now()): number {
    this.#trim(now)
    return this.#acquires.length / (DEMAND_WINDOW_MS / 1000)
  }

  /** Boots per second the host delivered at the current concurrency (0 before any boot). */
  createPerSecond(): number {
    return this.#rate(this.#limit) ?? this.#bestKnownRate()
  }

  /** A boot's latency at the current concurrency (ms), undefined before one was measured. */
  bootLatencyMs(): number | undefined {
    return this.#latency.get(this.#limit) ?? this.#latency.get(1)
  }

  /** Boots to run at once now. */
  get concurrency(): number {
    return this.#limit
  }

  /** Members to keep ready or booting: the demand during one boot, at least min, at most max. */
  target(min: number, max: number, now = performance.now()): number {
    if (max <= min) return min
    const latency = this.#latency.get(this.#limit) ?? this.#latency.get(1)
    if (latency === undefined) return min
    const demand = this.demandPerSecond(now)
    if (demand === 0) return min
    // Members taken while one boot runs, plus one per boot at once so each boot has a lease to cover.
    const needed = Math.ceil(demand * (latency / 1000)) + this.#limit
    return Math.max(min, Math.min(max, needed))
  }

  #trim(now: number): void {
    let drop = 0
    while (drop < this.#acquires.length && now - this.#acquires[drop] > DEMAND_WINDOW_MS) drop++
    if (drop > 0) this.#acquires.splice(0, drop)
  }

  #rate(c: number): number | undefined {
    const latency = this.#latency.get(c)
    return latency === undefined ? undefined : (c * 1000) / Math.max(latency, 0.001)
  }

  #bestKnownRate(): number {
    let best = 0
    for (const c of this.#latency.keys()) best = Math.max(best, this.#rate(c)!)
    return best
  }

  #adapt(): void {
    const here = this.#rate(this.#limit)
    if (here === undefined) return // not measured at this level yet
    const up = this.#limit < this.#maxConcurrency ? this.#rate(this.#limit + 1) : undefined
    const down = this.#limit > 1 ? this.#rate(this.#limit - 1) : undefined
    if (down !== undefined && down >= here) this.#limit--
    else if (this.#limit < this.#maxConcurrency && (up === undefined || up > here * GAIN_TO_CLIMB)) this.#limit++
  }
}
