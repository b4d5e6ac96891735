/**
 * Benchmark (issue 34): would handing a leased sandbox back to its pool after a reset beat a
 * fresh boot? Same run, interleaved: one job as a fresh sandbox (create → exec('true') → stop)
 * beside one job on a kept sandbox followed by a reset done from inside with one exec (kill every
 * process but the agent, empty /workspace, /tmp and /dev/shm). That reset is a LOWER BOUND of what
 * a real one costs: it does not undo writes elsewhere in the root's overlay layer, SysV IPC,
 * mounts, network or cgroup settings (those need the agent's help: see the report of issue 34).
 * Also W workers at once, each way, for jobs per second.
 *
 * Usage: node --import tsx bench/pool-reset.ts [--runs 100] [--workers 8] [--seconds 5]
 */
import os from 'node:os'
import { parseArgs } from 'node:util'
import type { Runtime } from '../lib/runtime.js'
import type { Sandbox } from '../lib/sandbox.js'
import { benchRuntime } from './support/host.js'
import { heading, note, row } from './support/report.js'
import { ms, ratio, summarize } from './support/stats.js'

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '100' },
    workers: { type: 'string', default: '8' },
    seconds: { type: 'string', default: '5' },
  },
})
const RUNS = Number(values.runs)
const WORKERS = Number(values.workers)
const SECONDS = Number(values.seconds)

const RESET =
  'kill -9 -1 2>/dev/null; rm -rf /workspace/* /workspace/.[!.]* /tmp/* /tmp/.[!.]* /dev/shm/* 2>/dev/null; true'

async function fresh(rt: Runtime): Promise<void> {
  const sb = await rt.create({ image: 'base' })
  await sb.exec('true')
  await sb.stop()
}

async function reused(sb: Sandbox): Promise<void> {
  await sb.exec('true')
  const r = await sb.exec('sh', ['-c', RESET])
  if (r.exitCode !== 0) throw new Error(`reset failed: ${r.exitCode} ${r.stderr}`)
}

async function perSecond(job: (worker: number) => Promise<void>): Promise<number> {
  let jobs = 0
  const t0 = performance.now()
  const end = t0 + SECONDS * 1000
  await Promise.all(
    Array.from({ length: WORKERS }, async (_, w) => {
      while (performance.now() < end) {
        await job(w)
        jobs++
      }
    }),
  )
  return jobs / ((performance.now() - t0) / 1000)
}

const { rt, dispose } = benchRuntime({ maxConcurrentSandboxes: 64 })
try {
  const kept = await Promise.all(Array.from({ length: WORKERS }, () => rt.create({ image: 'base' })))
  const freshMs: number[] = []
  const resetMs: number[] = []
  for (let i = 0; i < RUNS; i++) {
    let t0 = performance.now()
    await fresh(rt)
    freshMs.push(performance.now() - t0)
    t0 = performance.now()
    await reused(kept[0])
    resetMs.push(performance.now() - t0)
  }
  const f = summarize(freshMs)
  const r = summarize(resetMs)
  heading(
    `one job, ${RUNS} runs each, interleaved (${os.availableParallelism()} cores, load avg ${os.loadavg()[0].toFixed(1)})`,
  )
  row("fresh: create → exec('true') → stop", `p50 ${ms(f.p50)}  p95 ${ms(f.p95)}`)
  row("kept: exec('true') → reset exec (lower bound)", `p50 ${ms(r.p50)}  p95 ${ms(r.p95)}`)
  row('fresh / kept (p50)', ratio(f.p50, r.p50))
  const freshRate = await perSecond(() => fresh(rt))
  const keptRate = await perSecond((w) => reused(kept[w]))
  heading(`${WORKERS} workers for ${SECONDS} s each way`)
  row(
    'jobs per second',
    `fresh ${freshRate.toFixed(1)}  kept+reset ${keptRate.toFixed(1)}  (${ratio(keptRate, freshRate)})`,
  )
  note(
    'the reset here is a lower bound: the overlay layer outside /workspace and /tmp, IPC, mounts and network state are not undone',
  )
  await Promise.all(kept.map((sb) => sb.stop()))
} finally {
  await dispose()
}
