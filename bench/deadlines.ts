/**
 * Benchmark (issue 21 item 7): command deadlines under the sandbox's own load. N commands
 * `sh -c 'sleep 1 & yes > /dev/null'` run at once, each with a random timeoutMs in 1–200;
 * lateness is the agent's measured duration minus the timeout. Beside it, in the same run: the
 * unloaded figure (one `sleep` at a time, same random timeouts), and `exec('true')` with 100
 * busy commands beside idle.
 *
 * Usage: node --import tsx bench/deadlines.ts [--loads 8,50,200] [--idle 40] [--execs 50]
 */
import { parseArgs } from 'node:util'
import type { Sandbox } from '../lib/sandbox.js'
import { benchRuntime } from './support/host.js'
import { heading, note, row, target } from './support/report.js'
import { ms, summarize, type Summary } from './support/stats.js'

const { values } = parseArgs({
  options: {
    loads: { type: 'string', default: '8,50,200' },
    idle: { type: 'string', default: '40' },
    execs: { type: 'string', default: '50' },
  },
})
const LOADS = values.loads.split(',').map(Number)
const IDLE_ROUNDS = Number(values.idle)
const EXECS = Number(values.execs)
const BUSY = 100
const BURN = ['sh', '-c', 'sleep 1 & yes > /dev/null']
/** The bound the suite asserts at 50 concurrent (test/integration/deadlines.test.ts). */
const BOUND_MS = 250

const randomTimeout = () => 1 + Math.floor(Math.random() * 200)
const latency = (s: Summary) => `p50 ${ms(s.p50)}  p99 ${ms(s.p99)}  max ${ms(s.max)}  (n=${s.n})`

interface Lateness {
  late: number[]
  notTimedOut: number
}

async function lateness(sb: Sandbox, argv: string[], concurrent: number): Promise<Lateness> {
  const runs = Array.from({ length: concurrent }, () => {
    const timeoutMs = randomTimeout()
    return sb
      .start(argv[0], argv.slice(1), { timeoutMs })
      .wait()
      .then((r) => ({ r, timeoutMs }))
  })
  const late: number[] = []
  let notTimedOut = 0
  for (const { r, timeoutMs } of await Promise.all(runs)) {
    if (r.status !== 'timed_out') notTimedOut++
    else late.push((r.durationMs ?? NaN) - timeoutMs)
  }
  return { late, notTimedOut }
}

async function execTrue(sb: Sandbox, n: number): Promise<number[]> {
  const times: number[] = []
  for (let i = 0; i < n; i++) {
    const t0 = performance.now()
    await sb.exec('true')
    times.push(performance.now() - t0)
  }
  return times
}

const { rt, dispose } = benchRuntime()
try {
  const sb = await rt.create({ image: 'base', driver: 'namespace' })
  heading('timeout lateness (agent duration − timeoutMs), random timeouts 1–200 ms')
  const idle: number[] = []
  for (let i = 0; i < IDLE_ROUNDS; i++) idle.push(...(await lateness(sb, ['sleep', '10'], 1)).late)
  row('unloaded: one sleep at a time', latency(summarize(idle)))
  for (const n of LOADS) {
    const { late, notTimedOut } = await lateness(sb, BURN, n)
    const s = summarize(late)
    row(`${n} concurrent CPU-burning commands`, latency(s) + (notTimedOut ? `  ${notTimedOut} not timed_out` : ''))
    if (n === 50)
      target(`every one within ${BOUND_MS} ms at 50`, `max ${ms(s.max)}`, notTimedOut === 0 && s.max <= BOUND_MS)
  }

  heading("exec('true') round trip")
  const quiet = summarize(await execTrue(sb, EXECS))
  row('idle sandbox', latency(quiet))
  const busy = Array.from({ length: BUSY }, () => sb.start('sh', ['-c', 'yes > /dev/null']))
  await Promise.all(busy.map((c) => c.started()))
  const loaded = summarize(await execTrue(sb, EXECS))
  row(`${BUSY} busy commands beside it`, latency(loaded))
  await Promise.all(busy.map((c) => c.cancel({ mode: 'force' }).catch(() => {})))
  note('the agent runs in its own cgroup leaf (cpu.shares above the workload leaf) and commands start at nice 10')
} finally {
  await dispose()
}
