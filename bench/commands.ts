/**
 * Benchmark (issue 3): stdout throughput of one command to the host, beside the same
 * command spawned on the host with child_process in the same run, and the latency from
 * start() to the first log chunk of `echo`, beside spawn → first stdout data on the host.
 *
 * The base image's utilities are busybox (static), so "the same command" on the host is the
 * image's own busybox binary, run directly; the host's coreutils `head` is shown as well.
 * busybox `head -c` copies in 4 KiB pieces and burns ~1.5 s of CPU per 512 MiB on its own,
 * so `dd bs=64k` is the producer that measures the transport rather than the producer.
 *
 * Usage: node --import tsx bench/commands.ts [--mib 512] [--rounds 5] [--echoes 200]
 */
import { spawn } from 'node:child_process'
import os from 'node:os'
import path from 'node:path'
import { parseArgs } from 'node:util'
import type { Sandbox } from '../lib/sandbox.js'
import { baseRootfs, benchRuntime } from './support/host.js'
import { heading, note, row, target } from './support/report.js'
import { mbps, median, ms, percent, ratio, summarize, type Summary } from './support/stats.js'

const { values } = parseArgs({
  options: {
    mib: { type: 'string', default: '512' },
    rounds: { type: 'string', default: '9' },
    echoes: { type: 'string', default: '200' },
  },
})
const MIB = Number(values.mib)
const BYTES = MIB * 1024 * 1024
const ROUNDS = Number(values.rounds)
const ECHOES = Number(values.echoes)
const TARGET_SHARE = 0.5
const HOST_CPUS = os.availableParallelism()

const latency = (s: Summary) =>
  `p50 ${ms(s.p50)}  p95 ${ms(s.p95)}  p99 ${ms(s.p99)}  (min ${ms(s.min)}, max ${ms(s.max)}, n=${s.n})`
const rates = (r: number[]) => `${median(r).toFixed(0)} MB/s  (rounds: ${r.map((x) => x.toFixed(0)).join(', ')})`

/** MB/s of a command in the sandbox, every stdout byte counted by a 'stdout' listener. */
async function sandboxRate(sb: Sandbox, argv: string[]): Promise<number> {
  let bytes = 0
  const t0 = performance.now()
  const cmd = sb.start(argv[0], argv.slice(1), { timeoutMs: 300_000 })
  cmd.on('stdout', (data) => (bytes += data.length))
  const result = await cmd.wait()
  const elapsed = performance.now() - t0
  if (result.exitCode !== 0 || bytes !== BYTES)
    throw new Error(`${argv.join(' ')} in the sandbox: exit ${result.exitCode}, ${bytes} of ${BYTES} bytes`)
  return mbps(bytes, elapsed)
}

/** MB/s of a host process, read through a child_process pipe. */
function hostRate(file: string, args: string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    let bytes = 0
    const t0 = performance.now()
    const child = spawn(file, args, { stdio: ['ignore', 'pipe', 'ignore'] })
    child.stdout.on('data', (data: Buffer) => (bytes += data.length))
    child.once('error', reject)
    child.once('close', (code) => {
      const elapsed = performance.now() - t0
      if (code !== 0 || bytes !== BYTES)
        reject(new Error(`host ${file} ${args.join(' ')}: exit ${code}, ${bytes} of ${BYTES} bytes`))
      else resolve(mbps(bytes, elapsed))
    })
  })
}

/** Runs every measurement once as a warm-up, then ROUNDS interleaved rounds. */
async function rounds(runs: Array<() => Promise<number>>): Promise<number[][]> {
  for (const run of runs) await run()
  const out = runs.map(() => [] as number[])
  for (let i = 0; i < ROUNDS; i++) for (const [k, run] of runs.entries()) out[k].push(await run())
  return out
}

/** start('echo') → first 'log' event. */
async function sandboxFirstChunk(sb: Sandbox): Promise<number> {
  const t0 = performance.now()
  const cmd = sb.start('echo', ['hello'])
  const first = await new Promise<number>((resolve) => cmd.once('log', () => resolve(performance.now() - t0)))
  await cmd.wait()
  return first
}

/** spawn('echo') → first stdout data event. */
function hostFirstChunk(file: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now()
    let first = NaN
    const child = spawn(file, ['hello'], { stdio: ['ignore', 'pipe', 'ignore'] })
    child.stdout.once('data', () => (first = performance.now() - t0))
    child.once('error', reject)
    child.once('close', () => resolve(first))
  })
}

const { rt, dispose } = benchRuntime()
try {
  const busybox = path.join(await baseRootfs(rt), 'usr/bin/busybox')
  const sb1 = await rt.create({ image: 'base', driver: 'namespace', cpus: 1 })
  const sbN = await rt.create({ image: 'base', driver: 'namespace', cpus: HOST_CPUS })
  const dd = ['dd', 'if=/dev/zero', 'bs=65536', `count=${BYTES / 65536}`]
  const head = ['head', '-c', String(BYTES), '/dev/zero']

  heading(`stdout throughput, ${MIB} MiB: busybox ${dd.join(' ')} (median of ${ROUNDS})`)
  const [ddIn1, ddInN, ddHost] = await rounds([
    () => sandboxRate(sb1, dd),
    () => sandboxRate(sbN, dd),
    () => hostRate(busybox, dd),
  ])
  row('sandbox, cpus 1 (the default)', rates(ddIn1))
  row(`sandbox, cpus ${HOST_CPUS} (all the host's cores)`, rates(ddInN))
  row('baseline: the same busybox, spawned on host', rates(ddHost))
  row(
    'sandbox / host',
    `cpus 1: ${percent(median(ddIn1), median(ddHost))}   cpus ${HOST_CPUS}: ${percent(median(ddInN), median(ddHost))}`,
  )
  target(
    `≥ ${TARGET_SHARE * 100} % of host (cpus 1)`,
    percent(median(ddIn1), median(ddHost)),
    median(ddIn1) >= TARGET_SHARE * median(ddHost),
  )
  target(
    `≥ ${TARGET_SHARE * 100} % of host (cpus ${HOST_CPUS})`,
    percent(median(ddInN), median(ddHost)),
    median(ddInN) >= TARGET_SHARE * median(ddHost),
  )

  heading(`stdout throughput, ${MIB} MiB: ${head.join(' ')} (median of ${ROUNDS})`)
  const [headIn1, headInN, headHostBb, headHost] = await rounds([
    () => sandboxRate(sb1, head),
    () => sandboxRate(sbN, head),
    () => hostRate(busybox, head),
    () => hostRate('head', head.slice(1)),
  ])
  row('sandbox (busybox head), cpus 1', rates(headIn1))
  row(`sandbox (busybox head), cpus ${HOST_CPUS}`, rates(headInN))
  row('baseline: busybox head spawned on host', rates(headHostBb))
  row("baseline: host's own head (coreutils)", rates(headHost))
  row(
    'sandbox / busybox head on host',
    `cpus 1: ${percent(median(headIn1), median(headHostBb))}   cpus ${HOST_CPUS}: ${percent(median(headInN), median(headHostBb))}`,
  )
  row(
    "sandbox / host's own head",
    `cpus 1: ${percent(median(headIn1), median(headHost))}   cpus ${HOST_CPUS}: ${percent(median(headInN), median(headHost))}`,
  )
  note(
    'busybox head is itself the bottleneck here (4 KiB reads and writes, CPU-bound); the dd figures measure the transport.',
  )

  heading(`start() → first log chunk of echo (${ECHOES} runs, cpus 1)`)
  for (let i = 0; i < 20; i++) {
    await sandboxFirstChunk(sb1)
    await hostFirstChunk('echo')
  }
  const firstMs: number[] = []
  const hostMs: number[] = []
  for (let i = 0; i < ECHOES; i++) {
    firstMs.push(await sandboxFirstChunk(sb1))
    hostMs.push(await hostFirstChunk('echo'))
  }
  const first = summarize(firstMs)
  const host = summarize(hostMs)
  row("sb.start('echo') → first 'log'", latency(first))
  row("baseline: spawn('echo') → first stdout data", latency(host))
  row('sandbox / host (p50)', ratio(first.p50, host.p50))
  await sb1.stop()
  await sbN.stop()
} finally {
  await dispose()
}
