/**
 * Benchmark (issue 34): a pool under a steady stream of jobs. W workers loop
 * acquire → exec('true') → stop for S seconds, without a pool and with one, alternating in the
 * same run (R rounds each, so both see the same load on the machine). Reports acquire() p50/p95,
 * the share of acquires that fell back to a create, jobs per second and the pool/no-pool ratio.
 * A third phase never falls back: a worker that finds the pool empty waits for its next member
 * (what the jobs per second are when only the pool's adapted refill boots). A fourth runs the
 * same loop on a pool with `reuse: true` (a stopped lease is reset and offered again instead of
 * a fresh boot) and reports the reset's own cost (lib/pool-reset.ts, all three steps).
 *
 * Usage: node --import tsx bench/pool-steady.ts [--seconds 10] [--workers 8] [--rounds 2]
 *        [--size 8] [--max-size N] [--quiet]   (--quiet waits for an idle machine before each phase)
 */
import { once } from 'node:events'
import os from 'node:os'
import { parseArgs } from 'node:util'
import type { PoolOptions } from '../lib/pool.js'
import type { Runtime } from '../lib/runtime.js'
import type { Sandbox } from '../lib/sandbox.js'
import { benchRuntime, quietMachine } from './support/host.js'
import { heading, note, row, target } from './support/report.js'
import { ms, summarize } from './support/stats.js'

const { values } = parseArgs({
  options: {
    seconds: { type: 'string', default: '10' },
    workers: { type: 'string', default: '8' },
    rounds: { type: 'string', default: '2' },
    size: { type: 'string', default: '8' },
    'max-size': { type: 'string' },
    quiet: { type: 'boolean', default: false },
  },
})
const SECONDS = Number(values.seconds)
const WORKERS = Number(values.workers)
const ROUNDS = Number(values.rounds)
const SIZE = Number(values.size)
const MAX_SIZE = values['max-size'] === undefined ? undefined : Number(values['max-size'])

interface Phase {
  acquireMs: number[]
  jobs: number
  elapsedMs: number
  fallbacks: number
}

/** W workers looping acquire → exec('true') → stop until the phase's time is up. */
async function loop(
  rt: Runtime,
  take: () => Promise<Sandbox> = () => rt.acquire({ image: 'base' }),
): Promise<Omit<Phase, 'fallbacks'>> {
  const acquireMs: number[] = []
  let jobs = 0
  const t0 = performance.now()
  const end = t0 + SECONDS * 1000
  await Promise.all(
    Array.from({ length: WORKERS }, async () => {
      while (performance.now() < end) {
        const a = performance.now()
        const sb = await take()
        acquireMs.push(performance.now() - a)
        const r = await sb.exec('true')
        if (r.exitCode !== 0) throw new Error(`exec failed: ${r.exitCode}`)
        await sb.stop()
        jobs++
      }
    }),
  )
  return { acquireMs, jobs, elapsedMs: performance.now() - t0 }
}

const { rt, dispose } = benchRuntime({ maxConcurrentSandboxes: 64 })
const phases = { none: [] as Phase[], pool: [] as Phase[], wait: [] as Phase[], reuse: [] as Phase[] }
const resetMs: number[] = []
const load = () => os.loadavg()[0].toFixed(1)
try {
  await (await rt.create({ image: 'base' })).stop() // image built and warm before any phase
  for (let round = 0; round < ROUNDS; round++) {
    if (values.quiet) await quietMachine()
    const l0 = load()
    const plain = await loop(rt)
    phases.none.push({ ...plain, fallbacks: plain.acquireMs.length })
    note(`round ${round + 1} no pool: ${plain.jobs} jobs in ${(plain.elapsedMs / 1000).toFixed(1)} s (load avg ${l0})`)

    if (values.quiet) await quietMachine()
    const options: PoolOptions = {
      image: 'base',
      size: SIZE,
      ...(MAX_SIZE === undefined ? {} : { maxSize: MAX_SIZE }),
    } as PoolOptions
    const pool = rt.pool(options)
    await pool.full()
    const before = pool.stats.leased // hits: counted the same way by the old and the new pool
    const l1 = load()
    const pooled = await loop(rt)
    const hits = pool.stats.leased - before
    phases.pool.push({ ...pooled, fallbacks: pooled.acquireMs.length - hits })
    note(
      `round ${round + 1} pool: ${pooled.jobs} jobs in ${(pooled.elapsedMs / 1000).toFixed(1)} s (load avg ${l1}) stats ${JSON.stringify({ ...pool.stats, error: undefined })}`,
    )

    // Never a fallback: take only when a member is ready (acquire() takes synchronously), else wait for one.
    const l2 = load()
    const waited = await loop(rt, async () => {
      while (pool.stats.ready === 0) await once(pool, 'member')
      return rt.acquire({ image: 'base' })
    })
    phases.wait.push({ ...waited, fallbacks: 0 })
    note(
      `round ${round + 1} pool, waiting instead of a fallback: ${waited.jobs} jobs in ${(waited.elapsedMs / 1000).toFixed(1)} s (load avg ${l2})`,
    )
    await pool.close()

    if (values.quiet) await quietMachine()
    // Up to twice the members: the creates of acquires that found it empty join it at their stop.
    const reusePool = rt.pool({ ...options, maxSize: MAX_SIZE ?? 2 * SIZE, reuse: true })
    await reusePool.full()
    reusePool.on('reused', (_sb, ms) => resetMs.push(ms))
    const hitsBefore = reusePool.stats.hits
    const l3 = load()
    const reused = await loop(rt)
    const reuseHits = reusePool.stats.hits - hitsBefore
    phases.reuse.push({ ...reused, fallbacks: reused.acquireMs.length - reuseHits })
    note(
      `round ${round + 1} pool with reuse: ${reused.jobs} jobs in ${(reused.elapsedMs / 1000).toFixed(1)} s (load avg ${l3}) stats ${JSON.stringify({ ...reusePool.stats, error: undefined })}`,
    )
    await reusePool.close()
  }

  const sum = (list: Phase[]) => {
    const acquire = summarize(list.flatMap((p) => p.acquireMs))
    const jobs = list.reduce((a, p) => a + p.jobs, 0)
    const seconds = list.reduce((a, p) => a + p.elapsedMs, 0) / 1000
    const fallbacks = list.reduce((a, p) => a + p.fallbacks, 0)
    return { acquire, perSecond: jobs / seconds, fallbackShare: fallbacks / acquire.n }
  }
  const none = sum(phases.none)
  const pool = sum(phases.pool)
  heading(
    `${WORKERS} workers, acquire → exec('true') → stop, ${SECONDS} s × ${ROUNDS} rounds each, ${os.availableParallelism()} cores`,
  )
  row('no pool: acquire (= create)', `p50 ${ms(none.acquire.p50)}  p95 ${ms(none.acquire.p95)}  (n=${none.acquire.n})`)
  row(
    `pool size ${SIZE}${MAX_SIZE === undefined ? '' : `..${MAX_SIZE}`}: acquire`,
    `p50 ${ms(pool.acquire.p50)}  p95 ${ms(pool.acquire.p95)}  (n=${pool.acquire.n})`,
  )
  row('pool: acquires that fell back to a create', `${(pool.fallbackShare * 100).toFixed(1)} %`)
  row('jobs per second', `no pool ${none.perSecond.toFixed(1)}  pool ${pool.perSecond.toFixed(1)}`)
  const wait = sum(phases.wait)
  row(
    'pool, waiting for a member instead of a create',
    `acquire p50 ${ms(wait.acquire.p50)}  p95 ${ms(wait.acquire.p95)}  ${wait.perSecond.toFixed(1)} jobs/s (${(wait.perSecond / none.perSecond).toFixed(2)}× no pool)`,
  )
  const reuse = sum(phases.reuse)
  const reset = summarize(resetMs)
  row(
    'pool with reuse: acquire',
    `p50 ${ms(reuse.acquire.p50)}  p95 ${ms(reuse.acquire.p95)}  p99 ${ms(reuse.acquire.p99)}  (n=${reuse.acquire.n}), fell back ${(reuse.fallbackShare * 100).toFixed(1)} %`,
  )
  row(
    'pool with reuse: jobs per second',
    `${reuse.perSecond.toFixed(1)} (${(reuse.perSecond / none.perSecond).toFixed(2)}× no pool)`,
  )
  row('reset (lock, helper, reopen)', `p50 ${ms(reset.p50)}  p95 ${ms(reset.p95)}  (n=${reset.n})`)
  const ratio = pool.perSecond / none.perSecond
  target('acquire p50 ≤ 1 ms (fresh refill)', ms(pool.acquire.p50), pool.acquire.p50 <= 1)
  target('throughput ≥ 2× no pool (fresh refill)', `${ratio.toFixed(2)}×`, ratio >= 2)
  const reuseRatio = reuse.perSecond / none.perSecond
  target('acquire p50 ≤ 1 ms (reuse)', ms(reuse.acquire.p50), reuse.acquire.p50 <= 1)
  target('throughput ≥ 2× no pool (reuse)', `${reuseRatio.toFixed(2)}×`, reuseRatio >= 2)
} finally {
  await dispose()
}
