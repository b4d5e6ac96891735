// The main job: create a sandbox, run a command in it, stop it (uses the built library).
import { Sandbox } from '../dist/index.js'

const t0 = performance.now()
const sb = await Sandbox.create({ image: 'base' })
const ready = performance.now() - t0
const r = await sb.exec('sh', ['-c', 'echo "hello from $(hostname)"; uname -sr; id; echo oops >&2; exit 3'], {
  timeoutMs: 5000,
})
await sb.stop()
console.log(
  `sandbox ${sb.id} (${sb.driver} driver, image ${sb.image} ${sb.imageVersion.slice(0, 12)}) ready in ${ready.toFixed(1)} ms`,
)
console.log(
  JSON.stringify(
    {
      stdout: r.stdout,
      stderr: r.stderr,
      exitCode: r.exitCode,
      signal: r.signal,
      timedOut: r.timedOut,
      durationMs: r.durationMs,
      success: r.success,
    },
    null,
    2,
  ),
)
