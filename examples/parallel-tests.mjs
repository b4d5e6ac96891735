// A test harness: 20 jobs, each in its own sandbox, run in parallel with their logs streamed
// as they come, then a summary. Each job gets a fresh filesystem and no network, so one job's
// files, processes or crashes cannot touch another's.
//   node examples/parallel-tests.mjs          (FAIL_JOB=7 makes job 7 fail, to see a failure)
import { Runtime } from 'krunbox'

const JOBS = 20
// A 2-core machine runs 4 at a time; the rest wait for a slot (queue: true) instead of failing.
const runtime = new Runtime({ maxConcurrentSandboxes: 4, queue: true })
const failJob = Number(process.env.FAIL_JOB ?? -1)

async function runJob(n) {
  const started = Date.now()
  const sb = await runtime.create({ image: 'base', memoryMb: 128, pidsMax: 64 })
  try {
    // The "test file" of this job: checks some arithmetic and writes a report into its workspace.
    const script = `set -e
echo "job ${n}: computing"
result=$(( ${n} * ${n} ))
[ "$result" -eq ${n === failJob ? -1 : n * n} ] || { echo "job ${n}: expected ${n * n}, got $result" >&2; exit 1; }
echo "square=$result" > /workspace/report.txt
echo "job ${n}: ok"`
    await sb.fs.writeFile('/workspace/test.sh', script)
    const cmd = sb.start('sh', ['/workspace/test.sh'], { timeoutMs: 30_000 })
    cmd.on('log', (chunk) => {
      for (const line of chunk.data.toString().split('\n').filter(Boolean))
        console.log(`[${String(n).padStart(2)}] ${chunk.stream === 'stderr' ? '!' : ' '} ${line}`)
    })
    const result = await cmd.wait()
    const report = result.exitCode === 0 ? (await sb.fs.readFile('/workspace/report.txt')).data.toString().trim() : null
    return { n, passed: result.exitCode === 0, report, ms: Date.now() - started }
  } finally {
    await sb.stop()
  }
}

try {
  const results = await Promise.all(Array.from({ length: JOBS }, (_, i) => runJob(i + 1)))
  const failed = results.filter((r) => !r.passed)
  console.log(
    `\nsummary: ${JOBS} jobs, ${JOBS - failed.length} passed, ${failed.length} failed${failed.length ? ` (jobs ${failed.map((r) => r.n).join(', ')})` : ''}`,
  )
  console.log(`slowest job: ${Math.max(...results.map((r) => r.ms))} ms`)
  process.exitCode = failed.length === 0 ? 0 : 1
} finally {
  await runtime.close()
}
