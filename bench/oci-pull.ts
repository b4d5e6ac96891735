/**
 * Benchmark, OCI images (issue 29), against a local docker-registry (Debian's, as the tests):
 * - cold pull + unpack of a 3-layer image of ~70 MB (the python preset's tree split in two
 *   gzip layers, plus incompressible files) into a fresh cache, beside `skopeo copy` +
 *   `umoci raw unpack` of the same image in the same run (target: within 1.25×), with the
 *   longest event-loop stall during each of krunbox's pulls (target: under 20 ms), beside the
 *   longest stall of the same loop left idle for as long (the machine's own noise); CPU time (user + sys)
 *   of both beside the wall time, since the machine may be shared and CPU time does not wait;
 * - warm create from the pulled image vs from the base preset, interleaved (target: 1.1×);
 * - re-pull of an unchanged image with policy 'always': requests made (target: one manifest, no blob).
 * Usage: npx tsx bench/oci-pull.ts [--runs 5]
 */
import { spawnSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import {
  PerformanceObserver,
  constants as perfConstants,
  monitorEventLoopDelay,
  type PerformanceEntry,
} from 'node:perf_hooks'
import { parseArgs } from 'node:util'
import { ImageStore, Runtime } from '../lib/index.js'
import { blobGets, gzipLayer, pushImage, startRegistry, tarDirectory, tarLayer } from '../test/images/oci-registry.js'

const { values } = parseArgs({ options: { runs: { type: 'string', default: '5' } } })
const RUNS = Math.max(3, Number(values.runs))
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
const ms = (x: number) => `${x.toFixed(0)} ms`
// Trees of ~10 000 files are removed between pulls by rm(1): fs.rmSync's garbage in this process
// was collected during the next measured pull, and counted as its stall.
const removeTree = (dir: string) => spawnSync('rm', ['-rf', dir])

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-bench-oci-'))
const registry = await startRegistry()
try {
  const python = await new ImageStore().resolve('python')
  const staging = path.join(work, 'split')
  // Layer 1: the python tree without /usr/lib; layer 2: /usr/lib; layer 3: random bytes.
  fs.mkdirSync(path.join(staging, 'a'), { recursive: true })
  fs.mkdirSync(path.join(staging, 'b', 'usr'), { recursive: true })
  spawnSync('cp', ['-a', `${python.rootfs}/.`, path.join(staging, 'a')])
  fs.renameSync(path.join(staging, 'a', 'usr', 'lib'), path.join(staging, 'b', 'usr', 'lib'))
  const l1 = gzipLayer(tarDirectory(path.join(staging, 'a')))
  const l2 = gzipLayer(tarDirectory(path.join(staging, 'b')))
  const l3 = gzipLayer(
    await tarLayer(Array.from({ length: 12 }, (_, i) => ({ name: `opt/blob${i}`, content: randomBytes(1024 * 1024) }))),
  )
  const compressed = l1.blob.length + l2.blob.length + l3.blob.length
  await pushImage(registry, 'bench/py', '1', [l1, l2, l3], { env: ['PATH=/usr/bin:/bin'] })
  const ref = `${registry.host}/bench/py:1`
  console.log(
    `image: 3 layers, ${(compressed / 1e6).toFixed(1)} MB compressed, python preset ${(python.manifest.sizeBytes / 1e6).toFixed(1)} MB + 12 MB random`,
  )

  // One pull before the measured ones, into a cache thrown away: the setup's garbage (the layers
  // built above, ~150 MB of buffers) is collected then, not during a measured pull, and the
  // pull's code is compiled, as in a host that has been running.
  await new ImageStore({ cacheDir: path.join(work, 'cache-warm-up') }).pull(ref)
  removeTree(path.join(work, 'cache-warm-up'))
  // V8's memory reducer shrinks a heap that grew (the setup's) once the isolate has allocated
  // little for ~8 s: left to it, it fired during a measured pull (--trace-gc: "Mark-Compact
  // (reduce)", 12.5 + 7.8 ms) and was counted as that pull's stall. It runs here instead.
  await new Promise((resolve) => setTimeout(resolve, 12_000))

  const haveTools = spawnSync('sh', ['-c', 'command -v skopeo && command -v umoci']).status === 0
  const ours: number[] = []
  const theirs: number[] = []
  const stalls: number[] = []
  const idleStalls: number[] = []
  const busy: number[] = []
  // Collector pauses on the main thread: counted, so a change in garbage shows even when load hides the stalls.
  const majorGcs: number[] = []
  let gcEntries: PerformanceEntry[] = []
  const gcObserver = new PerformanceObserver((list) => gcEntries.push(...list.getEntries()))
  gcObserver.observe({ entryTypes: ['gc'] })
  const ourCpu: number[] = []
  const theirCpu: number[] = []
  const seconds = (t: string) => {
    const m = /^(\d+)m([\d.]+)s$/.exec(t)
    return m === null ? NaN : Number(m[1]) * 60 + Number(m[2])
  }
  for (let i = 0; i < RUNS; i += 1) {
    const cacheDir = path.join(work, `cache-${i}`)
    const delay = monitorEventLoopDelay({ resolution: 5 })
    delay.enable()
    gcEntries = []
    const elu = performance.eventLoopUtilization()
    let t = performance.now()
    const cpu = process.cpuUsage()
    await new ImageStore({ cacheDir }).pull(ref)
    ours.push(performance.now() - t)
    const used = process.cpuUsage(cpu)
    ourCpu.push((used.user + used.system) / 1000)
    busy.push(performance.eventLoopUtilization(elu).utilization)
    await new Promise((resolve) => setImmediate(resolve))
    majorGcs.push(
      gcEntries.filter(
        (e) =>
          ((e as { detail?: unknown }).detail as { kind?: number } | undefined)?.kind ===
          perfConstants.NODE_PERFORMANCE_GC_MAJOR,
      ).length,
    )
    delay.disable()
    stalls.push(delay.max / 1e6)
    // Same-run baseline: the longest stall of this loop doing nothing for as long, right after;
    // on a loaded machine a runnable thread waits for a CPU too, and that is not the pull's work.
    const idle = monitorEventLoopDelay({ resolution: 5 })
    idle.enable()
    await new Promise((resolve) => setTimeout(resolve, ours[ours.length - 1]))
    idle.disable()
    idleStalls.push(idle.max / 1e6)
    removeTree(cacheDir)
    if (haveTools) {
      const layout = path.join(work, `layout-${i}`)
      t = performance.now()
      // One shell runs both; its `times` gives their CPU time (children's user and sys). What
      // they print goes to a file: read into this process, it was garbage collected during the
      // next measured pull.
      const log = `${layout}.log`
      const both = spawnSync(
        'sh',
        [
          '-c',
          '{ skopeo copy -q --src-tls-verify=false "docker://$1" "oci:$2:img" && umoci raw unpack --image "$2:img" "$2/rootfs"; } >"$3" 2>&1 && times',
          'sh',
          ref,
          layout,
          log,
        ],
        { encoding: 'utf8' },
      )
      theirs.push(performance.now() - t)
      if (both.status !== 0) throw new Error(`skopeo/umoci failed: ${fs.readFileSync(log, 'utf8').slice(-4096)}`)
      removeTree(log)
      const [user, sys] = both.stdout.trim().split('\n').pop()!.split(/\s+/).map(seconds)
      theirCpu.push((user + sys) * 1000)
      removeTree(layout)
    }
  }
  console.log(
    `cold pull + unpack, median of ${RUNS}: krunbox ${ms(median(ours))}` +
      (haveTools
        ? `, skopeo copy + umoci raw unpack ${ms(median(theirs))} (${(median(ours) / median(theirs)).toFixed(2)}×; target ≤ 1.25×)`
        : ' (skopeo/umoci not installed: no baseline)'),
  )
  console.log(
    `CPU time (user + sys), median: krunbox ${ms(median(ourCpu))} (this process: main thread, workers, the registry client)` +
      (haveTools
        ? `, skopeo + umoci ${ms(median(theirCpu))} (${(median(ourCpu) / median(theirCpu)).toFixed(2)}×)`
        : ''),
  )
  // A stall is the loop running late; utilization says whether it was busy (our code) or waiting for a CPU (load).
  gcObserver.disconnect()
  const list = (xs: number[]) => xs.map((x) => x.toFixed(1)).join(', ')
  console.log(
    `longest event-loop stall per pull: median ${median(stalls).toFixed(1)} ms, worst ${Math.max(...stalls).toFixed(1)} ms (${list(stalls)}; target < 20 ms); event loop busy ${(median(busy) * 100).toFixed(1)} % of the pull; load average ${os.loadavg()[0].toFixed(1)}`,
  )
  console.log(
    `baseline, the same loop idle for as long after each pull: median ${median(idleStalls).toFixed(1)} ms, worst ${Math.max(...idleStalls).toFixed(1)} ms (${list(idleStalls)})`,
  )
  console.log(`major collections on the main thread per pull: median ${median(majorGcs)} (${majorGcs.join(', ')})`)

  // Warm creates: pulled image vs base preset, interleaved.
  const cacheDir = path.join(work, 'cache-warm')
  const store = new ImageStore({ cacheDir })
  await store.pull(ref)
  await store.register('bench-base', (await new ImageStore().resolve('base')).rootfs)
  const rt = new Runtime({ cacheDir })
  const fromImage: number[] = []
  const fromPreset: number[] = []
  try {
    for (let i = 0; i < RUNS * 2; i += 1) {
      for (const [image, out] of [
        [ref, fromImage],
        ['bench-base', fromPreset],
      ] as const) {
        const t = performance.now()
        const sb = await rt.create({ image })
        out.push(performance.now() - t)
        await sb.stop()
      }
    }
  } finally {
    await rt.close()
  }
  console.log(
    `warm create, median of ${RUNS * 2}: pulled image ${ms(median(fromImage))}, base image ${ms(median(fromPreset))} (${(median(fromImage) / median(fromPreset)).toFixed(2)}×; target ≤ 1.1×)`,
  )

  const before = registry.requests().length
  const blobsBefore = blobGets(registry).length
  await store.pull(ref, { policy: 'always' })
  const made = registry.requests().slice(before)
  console.log(
    `re-pull (always) of an unchanged image: ${made.length} request(s) (${made.map((r) => `${r.method} ${r.uri}`).join(', ')}), ${blobGets(registry).length - blobsBefore} blob requests (target: 1 manifest, 0 blobs)`,
  )
} finally {
  await registry.stop()
  fs.rmSync(work, { recursive: true, force: true })
}
