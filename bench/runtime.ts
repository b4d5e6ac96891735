/**
 * Benchmark (issue 5): create throughput at concurrency 1, 4, 16 and 32 (sandboxes ready per
 * second, p50/p99 create latency), beside bubblewrap starting `true` at the same concurrency
 * in the same run; and host memory with 100 idle sandboxes: RSS, PSS and private bytes of
 * all their processes, the host's used memory (MemTotal − MemAvailable, which also counts
 * kernel memory such as page tables and the sandboxes' tmpfs), and this Node process's growth.
 *
 * The idle measurement runs first, on a fresh process, so the Node figures are not blurred
 * by the heap the throughput levels leave behind.
 *
 * Usage: node --import tsx bench/runtime.ts [--levels 1,4,16,32] [--per-level 64] [--idle 100]
 * Run with node --expose-gc for steadier Node RSS figures (bench/run.ts does).
 */
import fs from 'node:fs'
import { parseArgs } from 'node:util'
import { bubblewrapPath } from '../lib/paths.js'
import type { Sandbox } from '../lib/sandbox.js'
import { baseRootfs, benchRuntime, bwrapTrueArgs, sleep, timeSpawn } from './support/host.js'
import { processChildren, treeMemory } from './support/procmem.js'
import { heading, note, row, target } from './support/report.js'
import { mib, ms, percent, summarize } from './support/stats.js'
import { runtimeState } from '../lib/runtime.js'

const { values } = parseArgs({
  options: {
    levels: { type: 'string', default: '1,4,16,32' },
    'per-level': { type: 'string', default: '64' },
    idle: { type: 'string', default: '100' },
  },
})
const LEVELS = values.levels.split(',').map(Number)
const PER_LEVEL = Number(values['per-level'])
const IDLE = Number(values.idle)
const TARGET_IDLE_RSS_BYTES = 5 * 1024 * 1024

/** Runs task(i) for i in 0..n-1 with `width` in flight; returns each one's milliseconds and the wall time. */
async function concurrently<T>(
  n: number,
  width: number,
  task: (i: number) => Promise<T>,
): Promise<{ results: T[]; latencies: number[]; wallMs: number }> {
  const results: T[] = []
  const latencies: number[] = []
  let next = 0
  const t0 = performance.now()
  await Promise.all(
    Array.from({ length: Math.min(width, n) }, async () => {
      while (next < n) {
        const i = next++
        const t = performance.now()
        results[i] = await task(i)
        latencies.push(performance.now() - t)
      }
    }),
  )
  return { results, latencies, wallMs: performance.now() - t0 }
}

function usedHostMemory(): number {
  const info = fs.readFileSync('/proc/meminfo', 'utf8')
  const kb = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+)`, 'm').exec(info)?.[1] ?? 0) * 1024
  return kb('MemTotal') - kb('MemAvailable')
}

const gc = (globalThis as { gc?: () => void }).gc ?? (() => {})
const { rt, dispose } = benchRuntime({
  maxConcurrentSandboxes: Math.max(IDLE, ...LEVELS.map((c) => Math.max(c, PER_LEVEL))) + 8,
})
const create = () => rt.create({ image: 'base', driver: 'namespace' })
const stopAll = (list: Sandbox[]) => concurrently(list.length, 8, (i) => list[i].stop())
try {
  const bwrap = bubblewrapPath()
  if (!bwrap) throw new Error('bwrap is not on PATH; run the project setup')
  const bwrapArgs = bwrapTrueArgs(await baseRootfs(rt))
  await stopAll((await concurrently(4, 2, create)).results)

  heading(`${IDLE} idle sandboxes`)
  gc()
  await sleep(1000)
  const nodeBefore = process.memoryUsage()
  const hostBefore = usedHostMemory()
  const fdsBefore = fs.readdirSync('/proc/self/fd').length
  const boot = await concurrently(IDLE, 8, create)
  const idle = boot.results
  row(`created ${IDLE} at concurrency 8`, `${ms(boot.wallMs)}  (${((IDLE / boot.wallMs) * 1000).toFixed(1)}/s)`)
  await sleep(2000)
  gc()
  await sleep(500)
  const children = processChildren()
  let rss = 0
  let pss = 0
  let priv = 0
  let processes = 0
  for (const sb of idle) {
    const record = runtimeState(rt).read(sb.id)
    if (!record) throw new Error(`no state record for sandbox ${sb.id}`)
    const tree = treeMemory(record.pid, children)
    rss += tree.rssBytes
    pss += tree.pssBytes
    priv += tree.privateBytes
    processes += tree.processes.length
  }
  const hostGrowth = usedHostMemory() - hostBefore
  const nodeAfter = process.memoryUsage()
  const nodeGrowth = nodeAfter.rss - nodeBefore.rss
  const heapGrowth = nodeAfter.heapUsed + nodeAfter.external - (nodeBefore.heapUsed + nodeBefore.external)
  const fdGrowth = fs.readdirSync('/proc/self/fd').length - fdsBefore
  row('sandbox processes (sum)', `RSS ${mib(rss)}  PSS ${mib(pss)}  private ${mib(priv)}  (${processes} processes)`)
  row('  per sandbox', `RSS ${mib(rss / IDLE)}  PSS ${mib(pss / IDLE)}  private ${mib(priv / IDLE)}`)
  row(
    'host used memory growth (MemTotal − MemAvailable)',
    `${mib(hostGrowth)}  (${mib(hostGrowth / IDLE)} per sandbox)`,
  )
  row('this Node process: RSS growth', `${mib(nodeGrowth)}  (${mib(nodeGrowth / IDLE)} per sandbox)`)
  row('this Node process: JS heap + external growth', `${mib(heapGrowth)}  (${mib(heapGrowth / IDLE)} per sandbox)`)
  row('this Node process: open fds growth', `${fdGrowth}  (${(fdGrowth / IDLE).toFixed(2)} per sandbox)`)
  note('host used memory also moves with anything else running on the machine; read it as an estimate')
  target(
    `≤ ${mib(TARGET_IDLE_RSS_BYTES)} RSS per idle sandbox (issue 2)`,
    mib(rss / IDLE),
    rss / IDLE <= TARGET_IDLE_RSS_BYTES,
  )
  await stopAll(idle)

  heading(`create throughput (${PER_LEVEL} sandboxes per level, kept alive until the level ends)`)
  for (const c of LEVELS) {
    const floor = await concurrently(PER_LEVEL, c, () => timeSpawn(bwrap, bwrapArgs))
    const made = await concurrently(PER_LEVEL, c, create)
    await stopAll(made.results)
    const lat = summarize(made.latencies)
    const rate = (PER_LEVEL / made.wallMs) * 1000
    const floorRate = (PER_LEVEL / floor.wallMs) * 1000
    row(`concurrency ${c}: sandboxes ready per second`, `${rate.toFixed(1)}/s  (${PER_LEVEL} in ${ms(made.wallMs)})`)
    row(`concurrency ${c}: create latency`, `p50 ${ms(lat.p50)}  p99 ${ms(lat.p99)}  (max ${ms(lat.max)})`)
    row(
      `concurrency ${c}: baseline bwrap … true per second`,
      `${floorRate.toFixed(1)}/s  (p99 ${ms(summarize(floor.latencies).p99)})  → sandbox = ${percent(rate, floorRate)} of it`,
    )
  }
} finally {
  await dispose()
}
