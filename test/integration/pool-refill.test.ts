/** A pool that refills from measured demand — hits and fallbacks counted, refill from the first take, bounds kept. (Issue 34.) */
import { once } from 'node:events'
import { describe, expect, it } from 'vitest'
import { RefillPlanner } from '../../lib/pool-refill.js'
import type { SandboxPool } from '../../lib/pool.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { runtimesClosedAfterAll } from '../helpers/runtime.js'

const runtime = runtimesClosedAfterAll()

/** Resolves once check() holds, re-checked on each member the pool gets (no polling, no sleep). */
function whenMember(pool: SandboxPool, check: () => boolean): Promise<void> {
  return new Promise((resolve) => {
    const test = () => {
      if (!check()) return
      pool.off('member', test)
      resolve()
    }
    pool.on('member', test)
    test()
  })
}

describe('pool refill (issue 34)', () => {
  it('stats count the acquires served from the pool and those that fell back to a create', async () => {
    const rt = runtime({ maxConcurrentSandboxes: 8 })
    const pool = rt.pool({ image: 'base', size: 2 })
    await pool.full()
    // acquire() takes synchronously: the first two get the ready members, the third finds none.
    const leased = await Promise.all([
      rt.acquire({ image: 'base' }),
      rt.acquire({ image: 'base' }),
      rt.acquire({ image: 'base' }),
    ])
    expect(new Set(leased.map((s) => s.id)).size).toBe(3)
    expect(pool.stats).toMatchObject({ hits: 2, fallbacks: 1, leased: 2 })
    expect(pool.stats.demandPerSecond).toBeGreaterThan(0)
    for (const sb of leased) expect((await sb.exec('true')).exitCode).toBe(0)
    await Promise.all(leased.map((sb) => sb.stop()))
    // The refill began with the first take; the pool tells when it is back at its target.
    if (pool.stats.ready < 2) await once(pool, 'refilled')
    expect(pool.stats.ready).toBeGreaterThanOrEqual(2)
    expect(pool.stats.createPerSecond).toBeGreaterThan(0)
  })

  it('a pool with maxSize grows above size under demand, never above maxSize; a fixed pool never above size', async () => {
    const rt = runtime({ maxConcurrentSandboxes: 16 })
    const growing = rt.pool({ image: 'base', size: 1, maxSize: 3, env: { POOL: 'growing' } })
    const fixed = rt.pool({ image: 'base', size: 2, env: { POOL: 'fixed' } })
    let over = 0
    growing.on('member', () => void (growing.stats.ready + growing.stats.booting > 3 && over++))
    fixed.on('member', () => void (fixed.stats.ready + fixed.stats.booting > 2 && over++))
    await Promise.all([growing.full(), fixed.full()])
    const leases: Sandbox[] = []
    // A take with a measured boot latency sets the target above size: one boot per boot in flight plus the demand.
    leases.push(await rt.acquire({ image: 'base', env: { POOL: 'growing' } }))
    leases.push(await rt.acquire({ image: 'base', env: { POOL: 'fixed' } }))
    await whenMember(growing, () => growing.stats.ready >= 2)
    await fixed.full()
    expect(growing.stats.ready + growing.stats.booting).toBeLessThanOrEqual(3)
    expect(fixed.stats.ready + fixed.stats.booting).toBeLessThanOrEqual(2)
    expect(over).toBe(0)
    expect((await leases[0].exec('sh', ['-c', 'echo $POOL'])).stdout).toBe('growing\n')
    await Promise.all(leases.map((sb) => sb.stop()))
  })

  it('never runs more boots at once than refillConcurrency', async () => {
    const rt = runtime({ maxConcurrentSandboxes: 16 })
    const pool = rt.pool({ image: 'base', size: 5, refillConcurrency: 1 })
    // Sampled on every turn of the event loop until the pool is full: each state the pool passes through.
    let most = 0
    let done = false
    const look = () => {
      most = Math.max(most, pool.stats.booting, rt.liveCount - pool.stats.ready)
      if (!done) setImmediate(look)
    }
    look()
    await pool.full()
    done = true
    expect(most).toBe(1)
    expect(pool.stats.refillConcurrency).toBe(1)
  })

  it('validates maxSize and refillConcurrency with codes', () => {
    const rt = runtime()
    expect(() => rt.pool({ image: 'base', size: 3, maxSize: 2 })).toThrow(
      expect.objectContaining({ code: 'S003', message: expect.stringContaining('maxSize') }),
    )
    expect(() => rt.pool({ image: 'base', size: 1, maxSize: 'x' } as never)).toThrow(
      expect.objectContaining({ code: 'S001', message: expect.stringContaining('maxSize') }),
    )
    expect(() => rt.pool({ image: 'base', size: 1, refillConcurrency: 0 })).toThrow(
      expect.objectContaining({ code: 'S003', message: expect.stringContaining('refillConcurrency') }),
    )
  })
})

describe('RefillPlanner', () => {
  it('climbs while one more boot at once delivers more boots per second, and steps back when it does not', () => {
    const planner = new RefillPlanner(4)
    expect(planner.concurrency).toBe(2)
    planner.recordBoot(100, 2) // 20/s at 2
    expect(planner.concurrency).toBe(3) // 3 not measured yet: try it
    planner.recordBoot(110, 3) // 27/s at 3: better
    expect(planner.concurrency).toBe(4)
    planner.recordBoot(400, 4) // 10/s at 4: the host is saturated
    expect(planner.concurrency).toBe(3)
    expect(planner.createPerSecond()).toBeCloseTo(3000 / 110, 3)
  })

  it('never exceeds its maximum, and sizes the target from the demand within min and max', () => {
    const planner = new RefillPlanner(1)
    expect(planner.concurrency).toBe(1)
    planner.recordBoot(50, 1)
    expect(planner.concurrency).toBe(1)
    for (let i = 0; i < 40; i++) planner.recordAcquire(1000 + i) // 40 acquires in the window: 20/s
    expect(planner.demandPerSecond(1100)).toBe(20)
    expect(planner.target(2, 10, 1100)).toBe(2) // 20/s × 50 ms = 1, plus one boot in flight
    for (let i = 0; i < 400; i++) planner.recordAcquire(1100 + i / 10) // now 220/s
    expect(planner.target(2, 10, 1200)).toBe(10)
    expect(planner.target(2, 2, 1200)).toBe(2)
    expect(planner.demandPerSecond(10_000)).toBe(0) // the window has passed
  })
})
