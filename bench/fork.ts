/**
 * Benchmark (issue 19): snapshot and fork. A sandbox writes FILES files holding MIB MiB; the
 * snapshot of it is timed beside two floors measured in the same run: reading the same files in
 * the sandbox (`tar -cf - | wc -c`) and writing them on the host (`cp -a` of the stored layer).
 * Then create({ from }) beside a plain create of the same image, interleaved.
 *
 * Usage: node --import tsx bench/fork.ts [--files 10000] [--mib 200] [--creates 40]
 */
import fs from 'node:fs'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { benchRuntime, timeSpawn } from './support/host.js'
import { heading, row, target } from './support/report.js'
import { ms, ratio, summarize } from './support/stats.js'
import { runtimeState } from '../lib/runtime.js'

const { values } = parseArgs({
  options: {
    files: { type: 'string', default: '10000' },
    mib: { type: 'string', default: '200' },
    creates: { type: 'string', default: '40' },
  },
})
const FILES = Number(values.files)
const MIB = Number(values.mib)
const CREATES = Number(values.creates)

const { rt, dispose } = benchRuntime({})
try {
  const sb = await rt.create({ image: 'base', diskMb: MIB * 2 + 64, memoryMb: MIB * 3 + 256 })
  const perFile = Math.floor((MIB * 1024 * 1024) / FILES)
  // One shell, no process per file (echo is a builtin), so the fill does not dominate the run.
  const line = Math.max(1, Math.floor((perFile * 3) / 4))
  const fill = await sb.exec(
    'sh',
    [
      '-c',
      `mkdir -p /srv/data && cd /srv/data && s=$(head -c ${line} /dev/urandom | base64 -w 0) && i=0; while [ $i -lt ${FILES} ]; do [ $((i % 100)) = 0 ] && mkdir d$((i / 100)); echo "$s" > d$((i / 100))/f$i; i=$((i + 1)); done`,
    ],
    { timeoutMs: 600_000 },
  )
  if (fill.exitCode !== 0) throw new Error(fill.stderr)
  heading(`snapshot of ${FILES} files, ${MIB} MiB`)
  let t0 = performance.now()
  const read = await sb.exec('sh', ['-c', 'tar -cf - srv/data | wc -c'], { cwd: '/' })
  const readMs = performance.now() - t0
  if (read.exitCode !== 0) throw new Error(read.stderr)
  t0 = performance.now()
  const snap = await sb.snapshot()
  const snapMs = performance.now() - t0
  const copy = path.join(runtimeState(rt).root, 'bench-copy')
  const writeMs = await timeSpawn('cp', ['-a', path.join(rt.snapshots.layerDir(snap.id), 'root'), copy])
  fs.rmSync(copy, { recursive: true, force: true })
  row('sb.snapshot()', `${ms(snapMs)} (${snap.entries} entries, ${(snap.bytes / 1048576).toFixed(0)} MiB)`)
  row('floor: tar -cf - | wc -c in the sandbox', ms(readMs))
  row('floor: cp -a of the layer on the host', ms(writeMs))
  row('snapshot / (read floor + write floor)', ratio(snapMs, readMs + writeMs))
  target('snapshot ≤ 1 s', ms(snapMs), snapMs <= 1000)
  await sb.stop()

  heading(`create ({ from: snapshot }) beside a plain create, ${CREATES} each, interleaved`)
  const forkMs: number[] = []
  const plainMs: number[] = []
  for (let i = 0; i < CREATES; i++) {
    let t = performance.now()
    const f = await rt.create({ from: snap })
    forkMs.push(performance.now() - t)
    await f.stop()
    t = performance.now()
    const p = await rt.create({ image: 'base' })
    plainMs.push(performance.now() - t)
    await p.stop()
  }
  const fork = summarize(forkMs)
  const plain = summarize(plainMs)
  row('create from snapshot', `p50 ${ms(fork.p50)}  p99 ${ms(fork.p99)}`)
  row('baseline: plain create', `p50 ${ms(plain.p50)}  p99 ${ms(plain.p99)}`)
  target('fork create p50 within 1.5× a plain create', ratio(fork.p50, plain.p50), fork.p50 <= 1.5 * plain.p50)
  rt.snapshots.remove(snap.id)
} finally {
  await dispose()
}
