/**
 * Benchmark (issue 2): sandbox create→ready latency, exec('true') round trip, and host
 * memory per idle sandbox, with the namespace driver and the base image. Baselines in the
 * same run: bubblewrap starting `true` with the same namespaces, and child_process.spawn('true').
 *
 * Then `krunbox run base -- echo hi </dev/null` end to end (issue 22: p99 within 1.5× of p50),
 * beside Node's own start-up.
 *
 * Usage: node --import tsx bench/create-exec.ts [--creates 60] [--execs 500] [--idle 10] [--cli-runs 200]
 */
import { parseArgs } from 'node:util'
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { bubblewrapPath } from '../lib/paths.js'
import type { Sandbox } from '../lib/sandbox.js'
import { baseRootfs, benchRuntime, bwrapTrueArgs, sleep, timeSpawn } from './support/host.js'
import { processChildren, treeMemory, type TreeMemory } from './support/procmem.js'
import { heading, note, row, target } from './support/report.js'
import { mib, ms, ratio, summarize, type Summary } from './support/stats.js'
import { runtimeState } from '../lib/runtime.js'

const { values } = parseArgs({
  options: {
    creates: { type: 'string', default: '60' },
    execs: { type: 'string', default: '500' },
    idle: { type: 'string', default: '10' },
    'cli-runs': { type: 'string', default: '200' },
  },
})
const CREATES = Number(values.creates)
const EXECS = Number(values.execs)
const IDLE = Number(values.idle)
const CLI_RUNS = Number(values['cli-runs'])
const TARGET_CLI_P99_VS_P50 = 1.5
const TARGET_CREATE_P50_MS = 30
const TARGET_EXEC_P50_MS = 2
const TARGET_EXEC_VS_SPAWN = 2
const TARGET_IDLE_PSS_BYTES = 5 * 1024 * 1024

const latency = (s: Summary) =>
  `p50 ${ms(s.p50)}  p95 ${ms(s.p95)}  p99 ${ms(s.p99)}  (min ${ms(s.min)}, max ${ms(s.max)}, n=${s.n})`

const { rt, dispose } = benchRuntime({ maxConcurrentSandboxes: Math.max(32, IDLE + 2) })
const create = () => rt.create({ image: 'base', driver: 'namespace' })
try {
  const bwrap = bubblewrapPath()
  if (!bwrap) throw new Error('bwrap is not on PATH; run the project setup')
  const bwrapArgs = bwrapTrueArgs(await baseRootfs(rt))

  // Warm-up: page cache, the addon, the image resolution, JIT.
  for (let i = 0; i < 3; i++) {
    await timeSpawn(bwrap, bwrapArgs)
    const sb = await create()
    await sb.exec('true')
    await sb.stop()
  }

  heading(`create → ready (namespace driver, image base, ${CREATES} sandboxes, sequential)`)
  const createMs: number[] = []
  const stopMs: number[] = []
  const floorMs: number[] = []
  for (let i = 0; i < CREATES; i++) {
    // Interleaved, so drift on the machine affects both series alike.
    floorMs.push(await timeSpawn(bwrap, bwrapArgs))
    const t0 = performance.now()
    const sb = await create()
    createMs.push(performance.now() - t0)
    const t1 = performance.now()
    await sb.stop()
    stopMs.push(performance.now() - t1)
  }
  const created = summarize(createMs)
  const floor = summarize(floorMs)
  row('Runtime.create → ready', latency(created))
  row('baseline: bwrap … true (spawn → exit)', latency(floor))
  row('create / baseline (p50)', ratio(created.p50, floor.p50))
  row('stop (not part of the target)', latency(summarize(stopMs)))
  target(`create→ready p50 ≤ ${TARGET_CREATE_P50_MS} ms`, ms(created.p50), created.p50 <= TARGET_CREATE_P50_MS)

  heading(`exec('true') round trip (${EXECS} calls, one sandbox)`)
  const sb = await create()
  for (let i = 0; i < 50; i++) {
    await sb.exec('true')
    await timeSpawn('true', [])
  }
  const execMs: number[] = []
  const agentMs: number[] = []
  const spawnMs: number[] = []
  for (let i = 0; i < EXECS; i++) {
    const t0 = performance.now()
    const r = await sb.exec('true')
    execMs.push(performance.now() - t0)
    agentMs.push(r.durationMs)
    spawnMs.push(await timeSpawn('true', []))
  }
  await sb.stop()
  const exec = summarize(execMs)
  const spawned = summarize(spawnMs)
  row("sb.exec('true')", latency(exec))
  row('  of it, the command itself (durationMs, 1 ms units)', latency(summarize(agentMs)))
  row("baseline: child_process.spawn('true')", latency(spawned))
  row('exec / spawn (p50)', ratio(exec.p50, spawned.p50))
  target(`exec p50 ≤ ${TARGET_EXEC_P50_MS} ms`, ms(exec.p50), exec.p50 <= TARGET_EXEC_P50_MS)
  target(
    `exec p50 ≤ ${TARGET_EXEC_VS_SPAWN}× spawn p50`,
    ratio(exec.p50, spawned.p50),
    exec.p50 <= TARGET_EXEC_VS_SPAWN * spawned.p50,
  )

  heading(`host memory per idle sandbox (${IDLE} sandboxes, monitored by ${bwrap})`)
  const idle: Sandbox[] = []
  for (let i = 0; i < IDLE; i++) idle.push(await create())
  await sleep(1000)
  const fresh = measure(idle)
  report('just booted', fresh)
  for (const s of idle) await s.exec('true')
  await sleep(1000)
  const used = measure(idle)
  report("after one exec('true') each", used)
  const perSandboxPss = used.pssBytes / idle.length
  await Promise.all(idle.map((s) => s.stop()))

  // Baseline: the same number of bare bubblewrap sandboxes idling in busybox sleep, measured alike.
  const rootfs = await baseRootfs(rt)
  const bare = Array.from({ length: IDLE }, () =>
    spawn(
      bwrap,
      [
        '--unshare-all',
        '--die-with-parent',
        '--ro-bind',
        rootfs,
        '/',
        '--proc',
        '/proc',
        '--dev',
        '/dev',
        '/bin/sleep',
        '1000',
      ],
      { stdio: 'ignore' },
    ),
  )
  await sleep(1000)
  const children = processChildren()
  const bareMemory = bare
    .map((c) => treeMemory(c.pid!, children))
    .reduce((a, t) => ({ rss: a.rss + t.rssBytes, pss: a.pss + t.pssBytes }), { rss: 0, pss: 0 })
  row(
    `baseline: bare bwrap + sleep, per sandbox`,
    `RSS ${mib(bareMemory.rss / IDLE)}  PSS ${mib(bareMemory.pss / IDLE)}`,
  )
  row('PSS / baseline', ratio(used.pssBytes, bareMemory.pss))
  for (const c of bare) c.kill('SIGKILL')
  note('PSS is what adds up across sandboxes; RSS counts the shared agent text and bwrap libraries in every one.')
  target(
    `≤ ${mib(TARGET_IDLE_PSS_BYTES)} PSS per idle sandbox`,
    mib(perSandboxPss),
    perSandboxPss <= TARGET_IDLE_PSS_BYTES,
  )

  heading(`krunbox run base -- echo hi </dev/null, end to end (${CLI_RUNS} runs)`)
  const cli = path.join(import.meta.dirname, '..', 'dist', 'cli.js')
  if (!fs.existsSync(cli)) throw new Error(`${cli} is missing; run npx tsup`)
  const cliHome = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-bench-cli-'))
  const cliEnv = {
    ...process.env,
    XDG_STATE_HOME: path.join(cliHome, 'state'),
    XDG_CONFIG_HOME: path.join(cliHome, 'config'),
  }
  const timeRun = (args: string[]) =>
    new Promise<number>((resolve, reject) => {
      const t0 = performance.now()
      // stdin is /dev/null ('ignore'), as in `krunbox run … </dev/null`.
      const child = spawn(process.execPath, args, { stdio: ['ignore', 'ignore', 'inherit'], env: cliEnv })
      child.once('error', reject)
      child.once('exit', (code) =>
        code === 0 ? resolve(performance.now() - t0) : reject(new Error(`${args.join(' ')} exited with ${code}`)),
      )
    })
  const runMs: number[] = []
  const nodeMs: number[] = []
  for (let i = 0; i < CLI_RUNS; i++) {
    runMs.push(await timeRun([cli, 'run', 'base', '--', 'echo', 'hi']))
    nodeMs.push(await timeRun(['-e', '']))
  }
  fs.rmSync(cliHome, { recursive: true, force: true })
  const runs = summarize(runMs)
  row('krunbox run base -- echo hi', latency(runs))
  row("baseline: node -e '' (start-up alone)", latency(summarize(nodeMs)))
  target(
    `run p99 ≤ ${TARGET_CLI_P99_VS_P50}× its p50`,
    ratio(runs.p99, runs.p50),
    runs.p99 <= TARGET_CLI_P99_VS_P50 * runs.p50,
  )
} finally {
  await dispose()
}

/** Sum over the sandboxes' process trees (bwrap and everything under it), and per process name. */
function measure(
  sandboxes: Sandbox[],
): TreeMemory & { byName: Map<string, { count: number; rss: number; pss: number; priv: number }> } {
  const children = processChildren()
  const byName = new Map<string, { count: number; rss: number; pss: number; priv: number }>()
  const total = { processes: [] as TreeMemory['processes'], rssBytes: 0, pssBytes: 0, privateBytes: 0 }
  for (const s of sandboxes) {
    const record = runtimeState(rt).read(s.id)
    if (!record) throw new Error(`no state record for sandbox ${s.id}`)
    const tree = treeMemory(record.pid, children)
    total.processes.push(...tree.processes)
    total.rssBytes += tree.rssBytes
    total.pssBytes += tree.pssBytes
    total.privateBytes += tree.privateBytes
    for (const p of tree.processes) {
      const e = byName.get(p.comm) ?? { count: 0, rss: 0, pss: 0, priv: 0 }
      e.count++
      e.rss += p.rssBytes
      e.pss += p.pssBytes
      e.priv += p.privateBytes
      byName.set(p.comm, e)
    }
  }
  return { ...total, byName }
}

function report(label: string, m: ReturnType<typeof measure>): void {
  const n = IDLE
  row(
    `${label}: per sandbox`,
    `RSS ${mib(m.rssBytes / n)}  PSS ${mib(m.pssBytes / n)}  private ${mib(m.privateBytes / n)}  (${m.processes.length / n} processes each)`,
  )
  for (const [name, e] of m.byName) {
    row(
      `  ${name} (×${e.count / n} per sandbox)`,
      `RSS ${mib(e.rss / n)}  PSS ${mib(e.pss / n)}  private ${mib(e.priv / n)}`,
    )
  }
  note(`RSS counts pages shared between sandboxes (agent text, bwrap's libraries) in every one; PSS shares them out.`)
}
