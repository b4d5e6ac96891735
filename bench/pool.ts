/**
 * Benchmark (issue 19): warm pool. acquire() latency over N leases at 8 in flight; "one command in
 * a fresh sandbox" (acquire + exec + stop) beside create + exec + stop without a pool and beside
 * bare `bwrap … true`, all in the same run; and idle density: PSS per idle sandbox and create
 * latency as H sandboxes are held at once.
 *
 * Usage: node --import tsx bench/pool.ts [--leases 1000] [--runs 200] [--hold 100]
 */
import { parseArgs } from 'node:util'
import { bubblewrapPath } from '../lib/paths.js'
import type { Sandbox } from '../lib/sandbox.js'
import { baseRootfs, benchRuntime, bwrapTrueArgs, timeSpawn } from './support/host.js'
import { processChildren, treeMemory } from './support/procmem.js'
import { heading, row, target } from './support/report.js'
import { mib, ms, ratio, summarize, type Summary } from './support/stats.js'
import { runtimeState } from '../lib/runtime.js'

const { values } = parseArgs({
  options: {
    leases: { type: 'string', default: '1000' },
    runs: { type: 'string', default: '200' },
    hold: { type: 'string', default: '100' },
  },
})
const LEASES = Number(values.leases)
const RUNS = Number(values.runs)
const HOLD = Number(values.hold)
const IN_FLIGHT = 8
const latency = (s: Summary) => `p50 ${ms(s.p50)}  p99 ${ms(s.p99)}  (max ${ms(s.max)}, n=${s.n})`

const { rt, dispose } = benchRuntime({ maxConcurrentSandboxes: Math.max(64, HOLD + 8) })
try {
  const bwrap = bubblewrapPath()!
  const bwrapArgs = bwrapTrueArgs(await baseRootfs(rt))

  heading(`acquire() from a warm pool: ${LEASES} leases, ${IN_FLIGHT} in flight`)
  // The pool is sized so the leases of this run never wait for a refill: what is measured is the lease.
  const pool = rt.pool({ image: 'base', size: IN_FLIGHT * 2, refillConcurrency: 2 })
  await pool.full()
  const acquireMs: number[] = []
  const leased: Sandbox[] = []
  let next = 0
  await Promise.all(
    Array.from({ length: IN_FLIGHT }, async () => {
      while (next++ < LEASES) {
        await pool.full()
        const t0 = performance.now()
        const sb = await rt.acquire({ image: 'base' })
        acquireMs.push(performance.now() - t0)
        leased.push(sb)
        void sb.stop().catch(() => {})
      }
    }),
  )
  const acquired = summarize(acquireMs)
  row('acquire()', latency(acquired))
  target(
    'acquire p50 ≤ 1 ms, p99 ≤ 5 ms',
    `${ms(acquired.p50)} / ${ms(acquired.p99)}`,
    acquired.p50 <= 1 && acquired.p99 <= 5,
  )

  heading(`one command in a fresh sandbox (${RUNS} runs each, interleaved)`)
  const pooledMs: number[] = []
  const plainMs: number[] = []
  const floorMs: number[] = []
  for (let i = 0; i < RUNS; i++) {
    await pool.full()
    let t0 = performance.now()
    const a = await rt.acquire({ image: 'base' })
    await a.exec('true')
    void a.stop().catch(() => {})
    pooledMs.push(performance.now() - t0)
    t0 = performance.now()
    const b = await rt.create({ image: 'base' })
    await b.exec('true')
    await b.stop()
    plainMs.push(performance.now() - t0)
    floorMs.push(await timeSpawn(bwrap, bwrapArgs))
  }
  const pooled = summarize(pooledMs)
  row('acquire + exec(true) + stop (stop not awaited)', latency(pooled))
  row('baseline: create + exec(true) + stop', latency(summarize(plainMs)))
  row('baseline: bwrap … true', latency(summarize(floorMs)))
  row('pooled / bwrap true (p50)', ratio(pooled.p50, summarize(floorMs).p50))
  target('acquire + exec + release p50 ≤ 3 ms', ms(pooled.p50), pooled.p50 <= 3)
  await pool.close()

  heading(`idle density: ${HOLD} idle sandboxes held at once`)
  const held: Sandbox[] = []
  const holdMs: number[] = []
  for (let i = 0; i < HOLD; i++) {
    const t0 = performance.now()
    held.push(await rt.create({ image: 'base' }))
    holdMs.push(performance.now() - t0)
  }
  const first = summarize(holdMs.slice(0, Math.min(20, HOLD)))
  const last = summarize(holdMs.slice(-Math.min(20, HOLD)))
  const children = processChildren()
  let pss = 0
  let rss = 0
  for (const sb of held) {
    const tree = treeMemory(runtimeState(rt).read(sb.id)!.pid, children)
    pss += tree.pssBytes
    rss += tree.rssBytes
  }
  row('create, first 20', latency(first))
  row(`create, last 20 (at ${HOLD})`, latency(last))
  row('per idle sandbox', `PSS ${mib(pss / HOLD)}  RSS ${mib(rss / HOLD)}`)
  target('PSS per idle sandbox ≤ 1.5 MiB', mib(pss / HOLD), pss / HOLD <= 1.5 * 1024 * 1024)
  target('create p99 at the last within 3× the first', ratio(last.p99, first.p99), last.p99 <= 3 * first.p99)
  await Promise.all(held.map((sb) => sb.stop()))
} finally {
  await dispose()
}
