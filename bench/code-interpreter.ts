/**
 * Benchmark (issue 42): the code interpreter beside the same ipykernel driven by jupyter_client
 * on the host, in the same run (Debian's python3-ipykernel and python3-jupyter-client, installed
 * by scripts/setup.sh; the host's suite may be older than the image's).
 *   - runCode('x = 1') round trip p50 (target ≤ 1.5× the host's jupyter_client)
 *   - the first cell in a fresh sandbox, kernel start included (target ≤ 1.3× starting the
 *     kernel on the host and running the cell), and from a pool with started kernels (p50 ≤ 30 ms)
 *   - a cell printing 10 000 lines: every line delivered, host heap after GC
 *   - 1 000 cells on one context: host heap after GC, the kernel's RSS
 *
 * Usage: node --expose-gc --import tsx bench/code-interpreter.ts [--rounds 200] [--fresh 5] [--leases 10]
 */
import { execFileSync } from 'node:child_process'
import { parseArgs } from 'node:util'
import { benchRuntime } from './support/host.js'
import { heading, note, row, target } from './support/report.js'
import { mib, ms, ratio, summarize } from './support/stats.js'

const { values } = parseArgs({
  options: {
    rounds: { type: 'string', default: '200' },
    fresh: { type: 'string', default: '5' },
    leases: { type: 'string', default: '10' },
  },
})
const ROUNDS = Number(values.rounds)
const FRESH = Number(values.fresh)
const LEASES = Number(values.leases)
const IMAGE = 'code-interpreter'

/** The host baseline: Debian's python3 with jupyter_client, one kernel started FRESH times and ROUNDS cells. */
const HOST_SCRIPT = `
import json, sys, time
from jupyter_client.manager import KernelManager
rounds, fresh = int(sys.argv[1]), int(sys.argv[2])
first = []
for i in range(fresh):
    t0 = time.perf_counter()
    km = KernelManager(kernel_name="python3", transport="ipc", ip="/tmp/kb-bench-kernel-%d" % i)
    km.start_kernel()
    kc = km.client(); kc.start_channels(); kc.wait_for_ready(timeout=60)
    kc.execute_interactive("x = 1", output_hook=lambda m: None)
    first.append((time.perf_counter() - t0) * 1000)
    if i < fresh - 1:
        kc.stop_channels(); km.shutdown_kernel(now=True)
trip = []
for _ in range(rounds):
    t0 = time.perf_counter()
    kc.execute_interactive("x = 1", output_hook=lambda m: None)
    trip.append((time.perf_counter() - t0) * 1000)
kc.stop_channels(); km.shutdown_kernel(now=True)
print(json.dumps({"first": first, "trip": trip}))
`

const heapAfterGc = () => {
  globalThis.gc?.()
  return process.memoryUsage().heapUsed
}

const { rt, dispose } = benchRuntime()
try {
  await rt.images.resolve(IMAGE)
  heading('the host baseline: jupyter_client and ipykernel on the host')
  const host = JSON.parse(
    execFileSync('/usr/bin/python3', ['-c', HOST_SCRIPT, String(ROUNDS), String(FRESH)], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    }),
  ) as { first: number[]; trip: number[] }
  const hostTrip = summarize(host.trip)
  const hostFirst = summarize(host.first)
  row(`host execute('x = 1'), ${ROUNDS} rounds`, `p50 ${ms(hostTrip.p50)}  p99 ${ms(hostTrip.p99)}`)
  row(`host kernel start + first cell, ${FRESH} kernels`, `p50 ${ms(hostFirst.p50)}`)

  heading('the first cell in a fresh sandbox (kernel start included)')
  const firstCell: number[] = []
  const createAndFirst: number[] = []
  for (let i = 0; i < FRESH; i++) {
    const t0 = performance.now()
    const sb = await rt.create({ image: IMAGE, memoryMb: 1024 })
    const t1 = performance.now()
    await sb.runCode('x = 1')
    firstCell.push(performance.now() - t1)
    createAndFirst.push(performance.now() - t0)
    await sb.stop()
  }
  const first = summarize(firstCell)
  row(`runCode('x = 1') on a ready sandbox, ${FRESH} sandboxes`, `p50 ${ms(first.p50)}`)
  row('create + that first cell', `p50 ${ms(summarize(createAndFirst).p50)}`)
  target('first cell ≤ 1.3× host start + cell', ratio(first.p50, hostFirst.p50), first.p50 <= 1.3 * hostFirst.p50)

  heading(`runCode('x = 1') round trip, ${ROUNDS} rounds on one context`)
  const sb = await rt.create({ image: IMAGE, memoryMb: 1024 })
  await sb.runCode('x = 1')
  const trips: number[] = []
  for (let i = 0; i < ROUNDS; i++) {
    const t0 = performance.now()
    await sb.runCode('x = 1')
    trips.push(performance.now() - t0)
  }
  const trip = summarize(trips)
  row('runCode', `p50 ${ms(trip.p50)}  p99 ${ms(trip.p99)}`)
  target('p50 ≤ 1.5× host jupyter_client', ratio(trip.p50, hostTrip.p50), trip.p50 <= 1.5 * hostTrip.p50)

  heading('a cell printing 10 000 lines')
  const heapBefore = heapAfterGc()
  let lines = 0
  const printed = await sb.runCode('for i in range(10000):\n    print(i)', {
    onStdout: (text) => (lines += text.split('\n').length - 1),
  })
  const joined = printed.logs.stdout
    .join('')
    .split('\n')
    .filter((l) => l !== '')
  const everyLine = joined.length === 10_000 && joined.every((l, i) => l === String(i))
  row('lines delivered (listener, execution)', `${lines}, ${joined.length} in order: ${everyLine}`)
  target('every line delivered', `${joined.length}`, everyLine && lines === 10_000)
  row('host heap after GC, before → after', `${mib(heapBefore)} → ${mib(heapAfterGc())}`)

  heading('1 000 cells on one context')
  const heapStart = heapAfterGc()
  for (let i = 0; i < 1000; i++) await sb.runCode(`y${i % 10} = ${i}`)
  const heapEnd = heapAfterGc()
  row('host heap after GC, before → after', `${mib(heapStart)} → ${mib(heapEnd)} (${mib(heapEnd - heapStart)})`)
  target('host heap flat (< 8 MiB growth)', mib(heapEnd - heapStart), heapEnd - heapStart < 8 * 1024 * 1024)
  const rss = await sb.exec('sh', [
    '-c',
    'for p in /proc/[0-9]*; do grep -q ipykernel_launcher $p/cmdline 2>/dev/null && grep VmRSS $p/status; done',
  ])
  row('kernel RSS after 1 000 cells', rss.stdout.trim())
  await sb.stop()

  heading(`from a pool with started kernels: acquire + runCode('x = 1'), ${LEASES} leases`)
  const pool = rt.pool({ image: IMAGE, memoryMb: 1024, size: 2, startKernels: ['python'] })
  const leaseMs: number[] = []
  for (let i = 0; i < LEASES; i++) {
    await pool.full()
    const t0 = performance.now()
    const leased = await rt.acquire({ image: IMAGE, memoryMb: 1024 })
    await leased.runCode('x = 1')
    leaseMs.push(performance.now() - t0)
    void leased.stop()
  }
  const lease = summarize(leaseMs)
  row('acquire + first cell', `p50 ${ms(lease.p50)}  max ${ms(lease.max)}`)
  target('pool p50 ≤ 30 ms', ms(lease.p50), lease.p50 <= 30)
  await pool.close()
  note(`host python: ${execFileSync('/usr/bin/python3', ['--version'], { encoding: 'utf8' }).trim()}`)
} finally {
  await dispose()
}
