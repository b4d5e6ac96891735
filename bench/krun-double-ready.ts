/**
 * Benchmark (issue 30): create→ready under the libkrun TEST DOUBLE, with libkrun's 5 s hold of a
 * refused vsock connection modelled (the double's default, as libkrun v1.19.0 does) and without
 * it (KRUN_DOUBLE_VSOCK_HOLD_MS=0), in the same run. The double's guest kernel "boots" 100 ms
 * before init. With a host that connects only once the agent says it listens, the two must be
 * within 1.5x; a host that connected early paid the 5 s on every boot. No VM boots here: these
 * are figures of the host's readiness logic, not of a microVM.
 * Usage: node --import tsx bench/krun-double-ready.ts [--boots 10]
 */
import os from 'node:os'
import fs from 'node:fs'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { hostProbe } from '../lib/probe.js'
import { Runtime } from '../lib/runtime.js'
import { libkrunDoublePath, libkrunfwDoubleDir } from '../test/fixtures/libkrun-double/index.js'

const { values } = parseArgs({ options: { boots: { type: 'string', default: '10' } } })
const BOOTS = Number(values.boots)

process.env.KRUNBOX_KRUN_ASSUME_USABLE = '1'
process.env.KRUNBOX_LIBKRUN_PATH = libkrunDoublePath
process.env.LD_LIBRARY_PATH = libkrunfwDoubleDir
hostProbe({ refresh: true })

const p50 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)]

async function measure(rt: Runtime, holdMs: string | undefined): Promise<number[]> {
  if (holdMs === undefined) delete process.env.KRUN_DOUBLE_VSOCK_HOLD_MS
  else process.env.KRUN_DOUBLE_VSOCK_HOLD_MS = holdMs
  const samples: number[] = []
  for (let i = 0; i < BOOTS; i++) {
    const t0 = performance.now()
    const sb = await rt.create({ driver: 'krun' })
    samples.push(performance.now() - t0)
    await sb.stop()
  }
  return samples
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-bench-ready-'))
fs.chmodSync(dir, 0o755)
const rt = new Runtime({ stateDir: path.join(dir, 'state') })
try {
  await rt.create({ driver: 'krun' }).then((sb) => sb.stop()) // image resolved, caches warm
  const held = await measure(rt, undefined)
  const free = await measure(rt, '0')
  const ratio = p50(held) / p50(free)
  console.log(
    JSON.stringify({
      boots: BOOTS,
      createReadyP50Ms: { holdModelled: Math.round(p50(held)), noHold: Math.round(p50(free)) },
      ratio: Math.round(ratio * 100) / 100,
      withinTarget: ratio <= 1.5,
    }),
  )
} finally {
  await rt.close()
  fs.rmSync(dir, { recursive: true, force: true })
}
