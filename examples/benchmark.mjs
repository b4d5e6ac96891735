// A benchmark runner: the round trip of a command in a sandbox beside the same command spawned
// on the host, measured in the same run (a figure without its baseline says little).
//   node examples/benchmark.mjs               (ROUNDS=500 for steadier figures)
import { spawn } from 'node:child_process'
import { Sandbox } from 'krunbox'

const ROUNDS = Number(process.env.ROUNDS ?? 50)

function percentile(samples, p) {
  const sorted = [...samples].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]
}

async function measure(label, once) {
  await once() // warm-up, not counted
  const samples = []
  for (let i = 0; i < ROUNDS; i++) {
    const t = process.hrtime.bigint()
    await once()
    samples.push(Number(process.hrtime.bigint() - t) / 1e6)
  }
  const row = { label, rounds: ROUNDS, p50: percentile(samples, 50), p99: percentile(samples, 99) }
  console.log(`${label.padEnd(28)} p50 ${row.p50.toFixed(2)} ms  p99 ${row.p99.toFixed(2)} ms  (${ROUNDS} rounds)`)
  return row
}

const hostTrue = () => new Promise((resolve, reject) => spawn('true').on('exit', resolve).on('error', reject))

const sb = await Sandbox.create({ image: 'base' })
try {
  const baseline = await measure('host spawn(true)', hostTrue)
  const sandboxed = await measure('sandbox exec(true)', () => sb.exec('true'))
  console.log(`ratio p50: ${(sandboxed.p50 / baseline.p50).toFixed(2)}x the host baseline`)
} finally {
  await sb.stop()
}
