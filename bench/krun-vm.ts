/**
 * Benchmark, VM tier: krun microVM create→ready (p50/p99) and exec round trip (p50/p99),
 * beside the floor measured in the same run: krun-shim running a bare krun_start_enter of
 * /bin/true (no agent, no image share, no vsock traffic), spawn to exit.
 * Targets on hardware KVM (issue 6): create→ready p50 ≤ 150 ms, exec round trip p50 ≤ 2 ms.
 *
 * Where microVMs cannot boot it prints the probe's reason and exits 0.
 * Usage: node --import tsx bench/krun-vm.ts [--boots 20] [--execs 200] [--floor 10]
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { encodeKrunShimConfig, type KrunShimConfig } from '../lib/drivers/krun-shim-codec.js'
import { krunShimPath, pipe, probe, spawn, waitForExit } from '../lib/native.js'
import { Runtime } from '../lib/runtime.js'

const { values } = parseArgs({
  options: {
    boots: { type: 'string', default: '20' },
    execs: { type: 'string', default: '200' },
    floor: { type: 'string', default: '10' },
  },
})
const BOOTS = Number(values.boots)
const EXECS = Number(values.execs)
const FLOORS = Number(values.floor)
const TARGET_CREATE_P50_MS = 150
const TARGET_EXEC_P50_MS = 2

function percentile(samples: number[], p: number): number {
  const sorted = [...samples].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]
}

function summary(samples: number[]): { p50: number; p99: number; min: number; max: number; n: number } {
  const round = (n: number) => Math.round(n * 100) / 100
  return {
    p50: round(percentile(samples, 50)),
    p99: round(percentile(samples, 99)),
    min: round(Math.min(...samples)),
    max: round(Math.max(...samples)),
    n: samples.length,
  }
}

/** A guest root holding only busybox as /true (static; argv[0] picks the applet). */
function floorRoot(dir: string, busybox: string): string {
  const root = path.join(dir, 'floor-root')
  for (const d of ['dev', 'proc', 'sys', 'tmp']) fs.mkdirSync(path.join(root, d), { recursive: true })
  fs.copyFileSync(busybox, path.join(root, 'true'))
  fs.chmodSync(path.join(root, 'true'), 0o555)
  return root
}

/** One bare VM: krun-shim → krun_start_enter(/true) → exit. Milliseconds from spawn to exit. */
async function floorRun(root: string, dir: string, n: number): Promise<number> {
  const config: KrunShimConfig = {
    cpus: 1,
    memoryMib: 128,
    rootDir: root,
    agentPath: '/true',
    vsockPort: 1024,
    socketPath: path.join(dir, `floor-${n}.sock`),
  }
  if (process.env.KRUNBOX_LIBKRUN_PATH) config.libkrunPath = process.env.KRUNBOX_LIBKRUN_PATH
  const configPipe = pipe()
  const t0 = performance.now()
  const child = spawn({ file: krunShimPath(), env: libraryEnv(), extraFds: [configPipe.readFd] })
  fs.closeSync(configPipe.readFd)
  fs.writeSync(configPipe.writeFd, encodeKrunShimConfig(config))
  fs.closeSync(configPipe.writeFd)
  const exit = await waitForExit(child.pid)
  const ms = performance.now() - t0
  fs.rmSync(config.socketPath, { force: true })
  if (exit.exitCode !== 0) throw new Error(`the floor VM (/true) exited with ${JSON.stringify(exit)}`)
  return ms
}

function libraryEnv(): string[] {
  return process.env.LD_LIBRARY_PATH ? [`LD_LIBRARY_PATH=${process.env.LD_LIBRARY_PATH}`] : []
}

async function main(): Promise<void> {
  const reason = process.env.KRUNBOX_LIBKRUN_PATH?.includes('libkrun-double')
    ? 'KRUNBOX_LIBKRUN_PATH points at the libkrun test double, not libkrun'
    : probe({ libkrunPath: process.env.KRUNBOX_LIBKRUN_PATH }).krunUnavailableReason
  if (reason !== null) {
    console.log(`krun-vm bench: skipped, microVMs cannot boot on this host: ${reason}`)
    return
  }
  // The runtime's stop waits on unreferenced handles only; keep the loop alive meanwhile.
  const keepAlive = setInterval(() => {}, 60_000)
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-bench-vm-'))
  const rt = new Runtime({ stateDir: path.join(dir, 'state') })
  try {
    const image = await rt.images.resolve('base')
    const root = floorRoot(dir, path.join(image.rootfs, 'usr', 'bin', 'busybox'))
    const floor: number[] = []
    const create: number[] = []
    const exec: number[] = []
    // Interleave floor and create so both see the same machine state.
    for (let i = 0; i < Math.max(BOOTS, FLOORS); i++) {
      if (i < FLOORS) floor.push(await floorRun(root, dir, i))
      if (i < BOOTS) {
        const t0 = performance.now()
        const sb = await rt.create({ driver: 'krun', image: 'base' })
        create.push(performance.now() - t0)
        await sb.stop()
      }
    }
    const sb = await rt.create({ driver: 'krun', image: 'base' })
    for (let i = 0; i < EXECS; i++) {
      const t0 = performance.now()
      await sb.exec('true')
      exec.push(performance.now() - t0)
    }
    await sb.stop()

    const result = {
      host: {
        cpus: os.cpus().length,
        kernel: os.release(),
        libkrun: probe({ libkrunPath: process.env.KRUNBOX_LIBKRUN_PATH }).libkrun.resolvedPath,
      },
      floorBareStartEnterMs: summary(floor),
      createToReadyMs: summary(create),
      execRoundTripMs: summary(exec),
    }
    const mark = (value: number, target: number) => (value <= target ? 'meets' : 'misses')
    console.log(
      `floor: krun_start_enter(/true), spawn→exit   p50 ${result.floorBareStartEnterMs.p50} ms  p99 ${result.floorBareStartEnterMs.p99} ms  (n=${floor.length})`,
    )
    console.log(
      `create→ready                               p50 ${result.createToReadyMs.p50} ms  p99 ${result.createToReadyMs.p99} ms  (n=${create.length}; ${mark(result.createToReadyMs.p50, TARGET_CREATE_P50_MS)} the ${TARGET_CREATE_P50_MS} ms target)`,
    )
    console.log(
      `exec round trip (true)                     p50 ${result.execRoundTripMs.p50} ms  p99 ${result.execRoundTripMs.p99} ms  (n=${exec.length}; ${mark(result.execRoundTripMs.p50, TARGET_EXEC_P50_MS)} the ${TARGET_EXEC_P50_MS} ms target)`,
    )
    console.log(JSON.stringify(result))
  } finally {
    await rt.close()
    fs.rmSync(dir, { recursive: true, force: true })
    clearInterval(keepAlive)
  }
}

await main()
