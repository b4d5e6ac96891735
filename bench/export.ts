/**
 * Benchmark (issue 41, "Export"): a sandbox with MIB MiB written (half random bytes, half
 * base64 text, in FILES files) exported as an OCI image layout, beside `tar -c | gzip` of the
 * same files on the host (the stored layer), and pushed to a local docker-registry, beside
 * `skopeo copy` of the layout the export wrote (each round a fresh registry, which has none of
 * the blobs: skopeo remembers where it pushed a blob and mounts it from there instead of sending
 * it again); ROUNDS rounds, interleaved. The layout's time
 * is timed both ways: sb.commit() (the agent's layer read and staged, then exported) and
 * snapshots.export() of a stored snapshot with no layer kept from before (the export alone).
 *
 * Usage: node --import tsx bench/export.ts [--mib 100] [--files 400] [--rounds 3]
 */
import fs from 'node:fs'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { runtimeState } from '../lib/runtime.js'
import { startRegistry } from '../test/images/oci-registry.js'
import { benchRuntime, timeSpawn } from './support/host.js'
import { heading, note, row, target } from './support/report.js'
import { median, ms, ratio } from './support/stats.js'

const { values } = parseArgs({
  options: {
    mib: { type: 'string', default: '100' },
    files: { type: 'string', default: '400' },
    rounds: { type: 'string', default: '3' },
  },
})
const MIB = Number(values.mib)
const FILES = Number(values.files)
const ROUNDS = Number(values.rounds)

const { rt, dispose } = benchRuntime({})
try {
  const sb = await rt.create({ image: 'base', diskMb: MIB * 3 + 64, memoryMb: 512 })
  const perFile = Math.floor((MIB * 1024 * 1024) / FILES)
  const fill = await sb.exec(
    'sh',
    [
      '-c',
      `mkdir -p /srv/data && cd /srv/data && i=0; while [ $i -lt ${FILES} ]; do ` +
        `if [ $((i % 2)) = 0 ]; then head -c ${perFile} /dev/urandom > f$i; ` +
        `else head -c $((${perFile} * 3 / 4)) /dev/urandom | base64 -w 76 | head -c ${perFile} > f$i; fi; i=$((i + 1)); done`,
    ],
    { timeoutMs: 600_000 },
  )
  if (fill.exitCode !== 0) throw new Error(fill.stderr)
  const snap = await sb.snapshot()
  const layer = path.join(rt.snapshots.layerDir(snap.id), 'root')
  const exportsDir = path.join(rt.snapshots.root, '.exports')
  const scratch = path.join(runtimeState(rt).root, 'bench-export')
  fs.mkdirSync(scratch)
  // The base image's tree layer is made by the first export and kept: it is not what is measured.
  await rt.snapshots.export(snap, { layout: path.join(scratch, 'warm') })

  heading(`export of ${MIB} MiB in ${FILES} files, ${ROUNDS} rounds`)
  const commitMs: number[] = []
  const exportMs: number[] = []
  const tarMs: number[] = []
  const pushMs: number[] = []
  const skopeoMs: number[] = []
  let compressed = 0
  for (let i = 0; i < ROUNDS; i++) {
    let t0 = performance.now()
    await sb.commit({ layout: path.join(scratch, `commit-${i}`) })
    commitMs.push(performance.now() - t0)

    fs.rmSync(exportsDir, { recursive: true, force: true })
    const layout = path.join(scratch, `export-${i}`)
    t0 = performance.now()
    const result = await rt.snapshots.export(snap, { layout })
    exportMs.push(performance.now() - t0)
    compressed = result.layers.at(-1)!.size

    tarMs.push(
      await timeSpawn('sh', ['-c', `tar -C '${layer}' -cf - . | gzip > '${path.join(scratch, `tar-${i}.tgz`)}'`]),
    )

    // The layer is kept from the export above: the push uploads, as skopeo does from the layout.
    for (const tool of ['krunbox', 'skopeo'] as const) {
      const registry = await startRegistry()
      try {
        const ref = `${registry.host}/bench/app:${i}`
        if (tool === 'krunbox') {
          t0 = performance.now()
          await rt.snapshots.export(snap, { push: ref })
          pushMs.push(performance.now() - t0)
        } else
          skopeoMs.push(
            await timeSpawn('skopeo', [
              'copy',
              '--quiet',
              '--dest-tls-verify=false',
              `oci:${layout}:latest`,
              `docker://${ref}`,
            ]),
          )
      } finally {
        await registry.stop()
      }
    }
    for (const name of [`commit-${i}`, `export-${i}`, `tar-${i}.tgz`])
      fs.rmSync(path.join(scratch, name), { recursive: true, force: true })
  }
  const [commit, exported, tar, push, skopeo] = [commitMs, exportMs, tarMs, pushMs, skopeoMs].map(median)
  row('sb.commit({ layout }), median', `${ms(commit!)}  (rounds: ${commitMs.map(ms).join(', ')})`)
  row('snapshots.export(snap, { layout }), median', `${ms(exported!)}  (rounds: ${exportMs.map(ms).join(', ')})`)
  row('baseline: tar -c | gzip of the layer, median', `${ms(tar!)}  (rounds: ${tarMs.map(ms).join(', ')})`)
  row("the sandbox's layer blob", `${(compressed / 1048576).toFixed(1)} MiB gzip`)
  row('snapshots.export(snap, { push }), median', `${ms(push!)}  (rounds: ${pushMs.map(ms).join(', ')})`)
  row('baseline: skopeo copy oci: → docker://, median', `${ms(skopeo!)}  (rounds: ${skopeoMs.map(ms).join(', ')})`)
  target('export as a layout ≤ 1.5× tar | gzip', ratio(exported!, tar!), exported! <= 1.5 * tar!)
  target('commit as a layout ≤ 1.5× tar | gzip', ratio(commit!, tar!), commit! <= 1.5 * tar!)
  target('push ≤ 1.5× skopeo copy', ratio(push!, skopeo!), push! <= 1.5 * skopeo!)
  note('commit also reads the layer from the agent and stages it on the host, as snapshot() does')
  rt.snapshots.remove(snap)
} finally {
  await dispose()
}
