/**
 * Benchmark (issue 22): what creating sandboxes costs the rest of the host process. The event
 * loop's delay (perf_hooks.monitorEventLoopDelay) while sandboxes are created and nothing else
 * runs; then, in a second pass, the latency of exec('true') on another, already running sandbox
 * while sandboxes are created. Each beside the same figure with no create running, in the same run. Then create throughput at
 * concurrency 16 beside bare `bwrap … true` at the same concurrency, and create latency with
 * many sandboxes alive beside the first ones.
 *
 * Usage: node --import tsx bench/event-loop.ts [--creates 100] [--concurrency 16] [--live 300]
 */
import { monitorEventLoopDelay, type IntervalHistogram } from 'node:perf_hooks'
import { parseArgs } from 'node:util'
import { spawn, spawnAsync, waitForExit } from '../lib/native.js'
import { bubblewrapPath } from '../lib/paths.js'
import type { Sandbox } from '../lib/sandbox.js'
import { baseRootfs, benchRuntime, bwrapTrueArgs, timeSpawn } from './support/host.js'
import { heading, note, row, target } from './support/report.js'
import { ms, ratio, summarize, type Summary } from './support/stats.js'

const { values } = parseArgs({
  options: {
    creates: { type: 'string', default: '100' },
    concurrency: { type: 'string', default: '16' },
    live: { type: 'string', default: '300' },
  },
})
const CREATES = Number(values.creates)
const CONCURRENCY = Number(values.concurrency)
const LIVE = Number(values.live)
const TARGET_STALL_MAX_MS = 2
const TARGET_STALL_P99_MS = 1
const TARGET_EXEC_VS_IDLE = 1.5
const TARGET_THROUGHPUT_VS_BWRAP = 0.6
const TARGET_CREATE_VS_BWRAP = 2
const TARGET_LIVE_VS_FIRST = 1.5

const latency = (s: Summary) => `p50 ${ms(s.p50)}  p99 ${ms(s.p99)}  (max ${ms(s.max)}, n=${s.n})`
const RESOLUTION_MS = 1
/** The histogram holds the time between two runs of its 1 ms timer (ns): the stall is what exceeds the 1 ms. */
const lateMs = (ns: number) => Math.max(0, ns / 1e6 - RESOLUTION_MS)
const stall = (h: IntervalHistogram) =>
  `p50 ${ms(lateMs(h.percentile(50)))}  p99 ${ms(lateMs(h.percentile(99)))}  max ${ms(lateMs(h.max))}  (n=${h.count})`

const { rt, dispose } = benchRuntime({ maxConcurrentSandboxes: Math.max(LIVE, CREATES) + CONCURRENCY + 8 })
const create = () => rt.create({ image: 'base', driver: 'namespace' })
const stopAll = (list: Sandbox[]) => Promise.all(list.splice(0).map((s) => s.stop()))

/** exec('true') on `sb` back to back until `until` settles; returns each call's latency. */
async function execsDuring(sb: Sandbox, until: Promise<unknown>): Promise<number[]> {
  let done = false
  void until.finally(() => (done = true))
  const out: number[] = []
  while (!done) {
    const t0 = performance.now()
    await sb.exec('true')
    out.push(performance.now() - t0)
  }
  return out
}

/** The event loop's delay, sampled every 1 ms, while `work` runs. */
async function loopDelayDuring(work: () => Promise<void>): Promise<IntervalHistogram> {
  const loop = monitorEventLoopDelay({ resolution: RESOLUTION_MS })
  loop.enable()
  await work()
  loop.disable()
  return loop
}

const createSome = async (made: Sandbox[]) => {
  for (let i = 0; i < CREATES; i++) made.push(await create())
}
const idleFor = (msToWait: number) => () => new Promise<void>((resolve) => setTimeout(resolve, msToWait))

try {
  const bwrap = bubblewrapPath()
  if (!bwrap) throw new Error('bwrap is not on PATH; run the project setup')
  const bwrapArgs = bwrapTrueArgs(await baseRootfs(rt))
  const other = await create()
  const made: Sandbox[] = []
  for (let i = 0; i < 3; i++) made.push(await create())
  await stopAll(made)

  heading(`event-loop delay while ${CREATES} sandboxes are created one after another (nothing else running)`)
  const quiet = await loopDelayDuring(idleFor(2000))
  const creating = await loopDelayDuring(() => createSome(made))
  await stopAll(made)
  row('baseline (no create): event-loop delay', stall(quiet))
  row('during creates: event-loop delay', stall(creating))
  target(
    `event-loop delay max ≤ ${TARGET_STALL_MAX_MS} ms`,
    ms(lateMs(creating.max)),
    lateMs(creating.max) <= TARGET_STALL_MAX_MS,
  )
  target(
    `event-loop delay p99 ≤ ${TARGET_STALL_P99_MS} ms`,
    ms(lateMs(creating.percentile(99))),
    lateMs(creating.percentile(99)) <= TARGET_STALL_P99_MS,
  )

  heading(`exec('true') on another sandbox, back to back, idle and while ${CREATES} sandboxes are created`)
  const idleExecs = summarize(await execsDuring(other, idleFor(2000)()))
  const busyExecs = summarize(await execsDuring(other, createSome(made)))
  await stopAll(made)
  row('baseline (no create): exec latency', latency(idleExecs))
  row('during creates: exec latency', latency(busyExecs))
  target(
    `exec p50 during creates ≤ ${TARGET_EXEC_VS_IDLE}× idle`,
    ratio(busyExecs.p50, idleExecs.p50),
    busyExecs.p50 <= TARGET_EXEC_VS_IDLE * idleExecs.p50,
  )

  heading(`the spawn step alone: bwrap … true through native spawn (on the main thread, the old path) and spawnAsync`)
  const spawnStalls = async (launch: () => Promise<number>) => {
    const loop = monitorEventLoopDelay({ resolution: RESOLUTION_MS })
    loop.enable()
    for (let i = 0; i < CREATES; i++) await waitForExit(await launch())
    loop.disable()
    return loop
  }
  const onMainThread = await spawnStalls(async () => spawn({ file: bwrap, args: bwrapArgs }).pid)
  const offThread = await spawnStalls(async () => (await spawnAsync({ file: bwrap, args: bwrapArgs })).pid)
  row('spawn (main thread): event-loop delay', stall(onMainThread))
  row('spawnAsync (libuv pool): event-loop delay', stall(offThread))

  heading(`create → ready, sequential (${CREATES}), beside bare bwrap … true`)
  const createMs: number[] = []
  const floorMs: number[] = []
  for (let i = 0; i < CREATES; i++) {
    floorMs.push(await timeSpawn(bwrap, bwrapArgs))
    const t0 = performance.now()
    made.push(await create())
    createMs.push(performance.now() - t0)
    if (made.length >= 20) await stopAll(made)
  }
  await stopAll(made)
  const created = summarize(createMs)
  const floor = summarize(floorMs)
  row('Runtime.create → ready', latency(created))
  row('baseline: bwrap … true (spawn → exit)', latency(floor))
  target(
    `create p50 ≤ ${TARGET_CREATE_VS_BWRAP}× bwrap true p50`,
    ratio(created.p50, floor.p50),
    created.p50 <= TARGET_CREATE_VS_BWRAP * floor.p50,
  )

  heading(`throughput at concurrency ${CONCURRENCY} (${CREATES} each)`)
  /** Successes per second; a failure (a boot deadline missed on a starved machine) is counted, not fatal. */
  const perSecond = async (one: () => Promise<unknown>): Promise<{ rate: number; failed: number }> => {
    let left = CREATES
    let failed = 0
    const t0 = performance.now()
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (left-- > 0) await one().catch(() => failed++)
      }),
    )
    return { rate: (CREATES - failed) / ((performance.now() - t0) / 1000), failed }
  }
  const { rate: bwrapRate } = await perSecond(() => timeSpawn(bwrap, bwrapArgs))
  const { rate: createRate, failed } = await perSecond(async () => made.push(await create()))
  await stopAll(made)
  row('creates per second', `${createRate.toFixed(1)}${failed > 0 ? ` (${failed} of ${CREATES} failed)` : ''}`)
  row('baseline: bwrap … true per second', bwrapRate.toFixed(1))
  target(
    `create throughput ≥ ${TARGET_THROUGHPUT_VS_BWRAP * 100} % of bwrap true`,
    `${((createRate / bwrapRate) * 100).toFixed(0)} %`,
    createRate >= TARGET_THROUGHPUT_VS_BWRAP * bwrapRate,
  )

  heading(`create latency with ${LIVE} idle sandboxes alive, beside the first ${Math.min(20, LIVE)}`)
  const live: Sandbox[] = []
  const firstMs: number[] = []
  // The floor: what the kernel's own work per live task and cgroup adds to a bare bwrap.
  const bwrapFirstMs: number[] = []
  for (let i = 0; i < LIVE; i++) {
    if (i < 20) bwrapFirstMs.push(await timeSpawn(bwrap, bwrapArgs))
    const t0 = performance.now()
    live.push(await create())
    if (i < 20) firstMs.push(performance.now() - t0)
  }
  const bwrapCrowdedMs: number[] = []
  for (let i = 0; i < 20; i++) bwrapCrowdedMs.push(await timeSpawn(bwrap, bwrapArgs))
  // As the first 20 were made: one after another, nothing ending meanwhile.
  const crowdedMs: number[] = []
  const more: Sandbox[] = []
  for (let i = 0; i < 20; i++) {
    const t0 = performance.now()
    more.push(await create())
    crowdedMs.push(performance.now() - t0)
  }
  await stopAll(more)
  // Each right after a stop: the stopped one's end (its network namespace and cgroups going,
  // which the kernel does in the background) overlaps the next create.
  const afterStopMs: number[] = []
  for (let i = 0; i < 20; i++) {
    const t0 = performance.now()
    const sb = await create()
    afterStopMs.push(performance.now() - t0)
    await sb.stop()
  }
  const first = summarize(firstMs)
  const crowded = summarize(crowdedMs)
  row(`create with 0–19 alive`, latency(first))
  row(`create with ${LIVE}–${LIVE + 19} alive`, latency(crowded))
  row(`create with ${LIVE} alive, each right after a stop (not the target)`, latency(summarize(afterStopMs)))
  const bwrapFirst = summarize(bwrapFirstMs)
  const bwrapCrowded = summarize(bwrapCrowdedMs)
  row(`baseline: bwrap … true with 0–19 alive`, latency(bwrapFirst))
  row(
    `baseline: bwrap … true with ${LIVE} alive`,
    `${latency(bwrapCrowded)}  → ${ratio(bwrapCrowded.p50, bwrapFirst.p50)} the first`,
  )
  target(
    `create p50 at ${LIVE} alive ≤ ${TARGET_LIVE_VS_FIRST}× the first`,
    ratio(crowded.p50, first.p50),
    crowded.p50 <= TARGET_LIVE_VS_FIRST * first.p50,
  )
  note(`the issue's target is 1 000 alive; ${LIVE} is what this run held (--live)`)
  await stopAll(live)
  await other.stop()
} finally {
  await dispose()
}
