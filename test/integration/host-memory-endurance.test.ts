/**
 * Safe to embed for days. One sandbox runs 10 000 exec()s and 1 000 start()s
 * with output, four at a time, and 520 sandboxes are created and stopped in turn; host heap and array buffers after
 * a GC stay within a few MiB of where they started, and RSS stops growing. Each exec is cheap (`true`, or a short echo) so the
 * test measures what the host keeps, not how fast the sandbox runs.
 * (Issue 21, point 2.)
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

type Memory = { heap: number; buffers: number; rss: number }

/** Heap, array buffers and RSS after a full collection. */
async function settled(): Promise<Memory> {
  for (let i = 0; i < 3; i++) {
    gc()
    await new Promise((r) => setImmediate(r))
  }
  const m = process.memoryUsage()
  return { heap: m.heapUsed, buffers: m.arrayBuffers, rss: m.rss }
}

/**
 * Runs a warm-up, then `rounds` identical rounds, and returns what each round added. A leak adds
 * to every round; the allocator and V8 grow RSS in steps (an arena filling, a heap page committed)
 * that land in one round and not the next. So the smallest round's growth bounds the leak, and
 * the total bounds the steps.
 */
async function growthPerRound(label: string, warmUp: () => Promise<void>, round: () => Promise<void>, rounds: number) {
  await warmUp()
  const marks = [await settled()]
  for (let i = 0; i < rounds; i++) {
    await round()
    marks.push(await settled())
  }
  const added = (key: keyof Memory) => marks.slice(1).map((m, i) => m[key] - marks[i][key])
  const total = (key: keyof Memory) => marks[rounds][key] - marks[0][key]
  const mib = (ns: number[]) => ns.map((n) => (n / MiB).toFixed(2)).join(', ')
  console.log(
    `${label}: rss ${mib(added('rss'))} MiB; heap ${mib(added('heap'))} MiB; array buffers ${mib(added('buffers'))} MiB`,
  )
  return {
    heap: total('heap'),
    buffers: total('buffers'),
    rss: total('rss'),
    smallestRssRound: Math.min(...added('rss')),
  }
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
    // would be 32 MiB per round), in LANES loops at once on the one sandbox.
    const LANES = 4
    const round = async (execs: number, starts: number) => {
      await Promise.all(Array.from({ length: LANES }, (_, i) => lane(share(execs, i), share(starts, i))))
    }
    // Lane i's part of n: the counts add up to n exactly.
    const share = (n: number, i: number) => Math.floor(n / LANES) + (i < n % LANES ? 1 : 0)
    const lane = async (execs: number, starts: number) => {
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
    // Warm up with the same work (JIT, buffer pools, the young generation's size), then four
    // identical rounds: 10 000 execs and 1 000 starts in all, four at a time.
    const growth = await growthPerRound(
      'endurance execs',
      () => round(1_000, 100),
      () => round(2_500, 250),
      4,
    )
    // Heap and array buffers are what the library keeps: tight bounds. A leak of 1 KiB per call
    // would add 2.7 MiB to every round's RSS, the smallest included.
    expect(growth.heap).toBeLessThan(4 * MiB)
    expect(growth.buffers).toBeLessThan(4 * MiB)
    expect(growth.smallestRssRound).toBeLessThan(2 * MiB)
    expect(growth.rss).toBeLessThan(48 * MiB)
    expect(sb.activeCommands).toBe(0)
  })

  it('keeps nothing of 520 sandboxes created and stopped in turn', { timeout: 600_000 }, async () => {
    const cycles = async (n: number) => {
      for (let i = 0; i < n; i++) {
        const s = await rt.create({ image: 'base', driver: 'namespace' })
        await s.stop()
      }
    }
    // As above. RSS also holds the allocator arenas of the libuv threads that fork the
    // sandboxes, which fill over the first rounds and then stay.
    const t0 = Date.now()
    const growth = await growthPerRound(
      'endurance sandboxes',
      () => cycles(20),
      () => cycles(100),
      5,
    )
    console.log(`endurance: 520 sandboxes in ${Date.now() - t0} ms`)
    // A leak of 30 KiB per sandbox would add 3 MiB to every round, the smallest included.
    expect(growth.heap).toBeLessThan(4 * MiB)
    expect(growth.buffers).toBeLessThan(4 * MiB)
    expect(growth.smallestRssRound).toBeLessThan(3 * MiB)
    expect(growth.rss).toBeLessThan(48 * MiB)
  })
})
