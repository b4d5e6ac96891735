/**
 * `truncate -s 100G /workspace/f` costs the sandbox nothing, and snapshot()
 * wrote all 100 GB to the host's disk. A layer whose files pass SNAPSHOT_MAX_BYTES at their full
 * size is refused (S404) at the header of the file that would pass it, with nothing of that file
 * written; a sparse file under the cap stays sparse in the layer, and a fork reads it back.
 * (Issue 28, point 5.)
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import { runtimesClosedAfterAll } from '../helpers/runtime.js'

const runtime = runtimesClosedAfterAll()

/** Bytes dir takes on disk (du), not its files' sizes. */
const diskBytes = (dir: string) => Number(execFileSync('du', ['-sB1', dir], { encoding: 'utf8' }).split('\t')[0])

describe('snapshot: sparse files', () => {
  it('snapshot: a 100 GiB sparse file is refused (S404) and the host disk never gets it', async () => {
    const rt = runtime()
    const sb = await rt.create({ image: 'base' })
    await sb.exec('sh', ['-c', 'echo kept > /workspace/a && truncate -s 100G /workspace/f'])
    const before = diskBytes(path.dirname(rt.snapshots.root))
    const err = await sb.snapshot().then(
      () => null,
      (e: unknown) => e,
    )
    expect(err).toBeInstanceOf(SandboxError)
    expect((err as SandboxError).code).toBe('S404')
    expect((err as SandboxError).message).toContain('/workspace/f')
    // Nothing staged is left, and what the host wrote meanwhile is nowhere near the file's size.
    expect(rt.snapshots.list()).toEqual([])
    expect(diskBytes(path.dirname(rt.snapshots.root)) - before).toBeLessThan(64 * 1024 * 1024)
    expect((await sb.exec('cat', ['/workspace/a'])).stdout).toBe('kept\n')
  })

  it('snapshot: a 256 MiB sparse file stays sparse in the layer, and a fork reads it back', async () => {
    const rt = runtime()
    const sb = await rt.create({ image: 'base' })
    await sb.exec('sh', [
      '-c',
      'truncate -s 256M /workspace/s && printf end | dd of=/workspace/s bs=1 seek=268435453 conv=notrunc 2>/dev/null',
    ])
    const snap = await sb.snapshot()
    const file = path.join(rt.snapshots.layerDir(snap.id), 'root', 'workspace', 's')
    expect(fs.statSync(file).size).toBe(256 * 1024 * 1024)
    expect(diskBytes(rt.snapshots.layerDir(snap.id))).toBeLessThan(8 * 1024 * 1024)
    const fork = await rt.create({ from: snap })
    expect((await fork.exec('sh', ['-c', 'stat -c %s /workspace/s; tail -c 3 /workspace/s'])).stdout).toBe(
      '268435456\nend',
    )
  })
})
