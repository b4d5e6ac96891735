/**
 * Issue 21, point 2: safe to embed for days. One sandbox runs 10 000 exec()s and 1 000 start()s
 * with output, and 1 000 sandboxes are created and stopped in turn; host heap and RSS after a GC
 * stay within a few MiB of where they started. Each exec is cheap (`true`, or a short echo) so the
 * test measures what the host keeps, not how fast the sandbox runs.
 */
import v8 from 'node:v8'
import vm from 'node:vm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'

v8.setFlagsFromString('--expose-gc')
const gc = vm.runInNewContext('gc') as () => void

const MiB = 1024 * 1024

/** Heap, array buffers and RSS after a full collection. */
async function settled(): Promise<{ heap: number; buffers: number; rss: number }> {
  for (let i = 0; i < 3; i++) {
    gc()
    await new Promise((r) => setImmediate(r))
  }
  const m = process.memoryUsage()
  return { heap: m.heapUsed, buffers: m.arrayBuffers, rss: m.rss }
}

let rt: Runtime
let sb: Sandbox

beforeAll(async () => {
  rt = testRuntime()
  sb = await rt.create({ image: 'base', driver: 'namespace' })
})
afterAll(async () => {
  await rt.close()
})

describe('a long-lived sandbox', () => {
  it('keeps nothing of 10 000 exec()s and 1 000 start()s with output', { timeout: 300_000 }, async () => {
    // One round: execs of `true`, then starts whose 64 KiB of output is read (a leak of the output
    // would be 32 MiB per round).
    const round = async (execs: number, starts: number) => {
      for (let i = 0; i < execs; i++) {
        const r = await sb.exec('true')
        if (r.exitCode !== 0) throw new Error(`exec ${i} exited ${r.exitCode}`)
      }
      for (let i = 0; i < starts; i++) {
        const cmd = sb.start('dd', ['if=/dev/zero', 'bs=65536', 'count=1', 'status=none'])
        let bytes = 0
        cmd.on('stdout', (d) => (bytes += d.length))
        const r = await cmd.wait()
        if (r.exitCode !== 0 || bytes !== 65536) throw new Error(`start ${i}: exit ${r.exitCode}, ${bytes} bytes`)
      }
    }
    // Warm up with the same work (JIT, buffer pools, the young generation's size), then two
    // identical rounds: what the second round adds is what the library keeps per call.
    await round(1_000, 100)
    const before = await settled()
    await round(5_000, 500)
    const middle = await settled()
    await round(5_000, 500)
    const after = await settled()
    const mib = (n: number) => (n / MiB).toFixed(2)
    console.log(
      `long-life: heap ${mib(middle.heap - before.heap)} then ${mib(after.heap - middle.heap)} MiB, ` +
        `array buffers ${mib(middle.buffers - before.buffers)} then ${mib(after.buffers - middle.buffers)} MiB, ` +
        `rss ${mib(middle.rss - before.rss)} then ${mib(after.rss - middle.rss)} MiB`,
    )
    // Heap and array buffers are the tight bounds (what the library keeps). RSS also counts the
    // allocator's and V8's committed-but-free pages, which grow over the first few thousand calls
    // and then stay, so RSS must be flat over the second of two identical rounds.
    expect(after.heap - before.heap).toBeLessThan(4 * MiB)
    expect(after.buffers - before.buffers).toBeLessThan(4 * MiB)
    expect(after.rss - middle.rss).toBeLessThan(12 * MiB)
    expect(after.rss - before.rss).toBeLessThan(48 * MiB)
    expect(sb.activeCommands).toBe(0)
  })

  it('keeps nothing of 520 sandboxes created and stopped in turn', { timeout: 600_000 }, async () => {
    const cycles = async (n: number) => {
      for (let i = 0; i < n; i++) {
        const s = await rt.create({ image: 'base', driver: 'namespace' })
        await s.stop()
      }
    }
    // As above: warm up, then two identical rounds; RSS also holds the allocator arenas of the
    // libuv threads that fork the sandboxes, which fill during the first rounds and then stay.
    await cycles(20)
    const before = await settled()
    const t0 = Date.now()
    await cycles(250)
    const middle = await settled()
    await cycles(250)
    const after = await settled()
    const mib = (n: number) => (n / MiB).toFixed(2)
    console.log(
      `long-life: 500 sandboxes in ${Date.now() - t0} ms; heap ${mib(middle.heap - before.heap)} then ${mib(after.heap - middle.heap)} MiB, ` +
        `array buffers ${mib(after.buffers - before.buffers)} MiB, rss ${mib(middle.rss - before.rss)} then ${mib(after.rss - middle.rss)} MiB`,
    )
    expect(after.heap - before.heap).toBeLessThan(4 * MiB)
    expect(after.buffers - before.buffers).toBeLessThan(4 * MiB)
    expect(after.rss - middle.rss).toBeLessThan(12 * MiB)
    expect(after.rss - before.rss).toBeLessThan(48 * MiB)
  })
})
