/**
 * A failed unpack is S102 with retry advice from its cause. Layers are verified blobs, so a
 * hostile or broken layer (an entry that climbs out, a hard link out of the rootfs or at a
 * directory, a bad whiteout, a bomb past the size or entry bound, a diff_id that does not
 * match, compression or tar that does not parse) fails the same way on every try: a caller
 * that retries `retryable` errors must not pull it again and again. A full disk may pass: the
 * same pull is retryable and succeeds once there is room.
 */
import { execFileSync, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import zlib from 'node:zlib'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ImageStore } from '../../lib/images/index.js'
import {
  gzipLayer,
  imageConfig,
  plainLayer,
  pushImage,
  sha256,
  startRegistry,
  tarLayer,
  type Layer,
  type Registry,
} from '../images/oci-registry.js'

let registry: Registry
let work: string

beforeAll(async () => {
  registry = await startRegistry()
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-oci-unpack-retry-'))
})

afterAll(async () => {
  await registry?.stop()
  fs.rmSync(work, { recursive: true, force: true })
})

const notRetryable = (problem: string) => ({
  code: 'S102',
  retryable: false,
  message: expect.stringContaining(problem),
})

async function pullOf(
  repo: string,
  layers: Layer[],
  store = new ImageStore({ cacheDir: path.join(work, `cache-${repo.replace('/', '-')}`) }),
) {
  await pushImage(registry, repo, '1', layers)
  return store.pull(`${registry.host}/${repo}:1`)
}

describe('OCI unpack: retry advice', () => {
  it('oci unpack: hostile entries (.. climb, hard link out of the rootfs or at a directory, bad whiteout) are refused as not retryable', async () => {
    await expect(
      pullOf('evil/climb', [plainLayer(await tarLayer([{ name: '../../../../tmp/pwned', content: 'x' }]))]),
    ).rejects.toMatchObject(notRetryable('climbs with ..'))
    await expect(
      pullOf('evil/linkout', [
        plainLayer(await tarLayer([{ name: 'h', type: 'link', linkname: '../../../../etc/passwd' }])),
      ]),
    ).rejects.toMatchObject(notRetryable('climbs with ..'))
    await expect(
      pullOf('evil/linkdir', [
        plainLayer(
          await tarLayer([
            { name: 'd/', type: 'directory' },
            { name: 'h', type: 'link', linkname: 'd' },
          ]),
        ),
      ]),
    ).rejects.toMatchObject(notRetryable('points at a directory'))
    await expect(pullOf('evil/whiteout', [plainLayer(await tarLayer([{ name: 'x/.wh...' }]))])).rejects.toMatchObject(
      notRetryable('bad whiteout'),
    )
  })

  it('oci unpack: a decompression bomb and an entry flood past the bounds are refused as not retryable', async () => {
    const store = new ImageStore({
      cacheDir: path.join(work, 'cache-bounds'),
      unpackLimits: { maxBytes: 2 * 1024 * 1024, maxEntries: 100 },
    })
    await expect(
      pullOf(
        'evil/bomb',
        [gzipLayer(await tarLayer([{ name: 'zeros', content: Buffer.alloc(8 * 1024 * 1024) }]))],
        store,
      ),
    ).rejects.toMatchObject(notRetryable('unpacks to more than'))
    await expect(
      pullOf(
        'evil/flood',
        [gzipLayer(await tarLayer(Array.from({ length: 150 }, (_, i) => ({ name: `f${i}`, content: '' }))))],
        store,
      ),
    ).rejects.toMatchObject(notRetryable('more than 100 entries'))
  })

  it('oci unpack: a layer that does not match its diff_id, broken gzip and a non-tar layer are refused as not retryable', async () => {
    const layer = plainLayer(await tarLayer([{ name: 'g', content: 'g' }]))
    await expect(pullOf('evil/diffid', [{ ...layer, diffId: sha256('something else') }])).rejects.toMatchObject(
      notRetryable('diff_id'),
    )
    // A gzip header over garbage: the blob's digest is its own, the content cannot be decompressed.
    const gz = zlib.gzipSync(await tarLayer([{ name: 'f', content: 'data'.repeat(1000) }]))
    const broken = Buffer.concat([gz.subarray(0, 10), Buffer.alloc(gz.length - 10, 0xab)])
    await expect(
      pullOf('evil/gzip', [
        { blob: broken, diffId: sha256('unknown'), mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip' },
      ]),
    ).rejects.toMatchObject({ code: 'S102', retryable: false })
    const notTar = Buffer.alloc(4096, 0x41)
    await expect(pullOf('evil/nottar', [plainLayer(notTar)])).rejects.toMatchObject({ code: 'S102', retryable: false })
  })

  it('oci pull: a tampered layer downloaded while the one before unpacks is refused with the download error, nothing is stored or published', async () => {
    const first = gzipLayer(await tarLayer([{ name: 'big', content: Buffer.alloc(4 * 1024 * 1024, 7) }]))
    const second = plainLayer(await tarLayer([{ name: 'f', content: 'real' }]))
    await pushImage(registry, 'evil/second', '1', [first, second])
    // The registry serves what it stores: swap the second layer's bytes in its storage (same length).
    const hex = sha256(second.blob).slice(7)
    const stored = path.join(
      registry.dir,
      'data',
      'docker',
      'registry',
      'v2',
      'blobs',
      'sha256',
      hex.slice(0, 2),
      hex,
      'data',
    )
    const evil = await tarLayer([{ name: 'f', content: 'evil' }])
    expect(evil.length).toBe(second.blob.length)
    fs.writeFileSync(stored, evil)
    const cacheDir = path.join(work, 'cache-second')
    const store = new ImageStore({ cacheDir })
    await expect(store.pull(`${registry.host}/evil/second:1`)).rejects.toMatchObject(
      notRetryable('does not match its content'),
    )
    expect(fs.readdirSync(path.join(cacheDir, 'blobs', 'sha256'))).not.toContain(hex)
    expect(await store.list()).toEqual([])
    expect(fs.readdirSync(cacheDir).filter((n) => /^[0-9a-f]{64}$/.test(n) || n.startsWith('.tmp'))).toEqual([])
  })

  it('oci unpack: a hostile layer in an imported archive is refused as not retryable', async () => {
    const layer = plainLayer(await tarLayer([{ name: '../../../escape', content: 'x' }]))
    const config = imageConfig([layer])
    const saved = path.join(work, 'saved')
    fs.mkdirSync(path.join(saved, 'l'), { recursive: true })
    fs.writeFileSync(path.join(saved, 'config.json'), config)
    fs.writeFileSync(path.join(saved, 'l', 'layer.tar'), layer.blob)
    fs.writeFileSync(
      path.join(saved, 'manifest.json'),
      JSON.stringify([{ Config: 'config.json', RepoTags: ['x:1'], Layers: ['l/layer.tar'] }]),
    )
    const archive = path.join(work, 'saved.tar')
    expect(spawnSync('tar', ['-C', saved, '-cf', archive, '.']).status).toBe(0)
    await expect(
      new ImageStore({ cacheDir: path.join(work, 'cache-import') }).import(archive, { name: 'evil' }),
    ).rejects.toMatchObject(notRetryable('climbs with ..'))
  })

  it.skipIf(process.getuid?.() !== 0)(
    'oci unpack: an image larger than half the free space is refused as retryable before it is written, and the same pull succeeds once there is room',
    async () => {
      const cacheDir = path.join(work, 'small-disk')
      fs.mkdirSync(cacheDir)
      execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=2m', 'krunbox-test-enospc', cacheDir])
      try {
        const store = new ImageStore({ cacheDir })
        // 8 MiB of zeros: a blob of a few KiB that unpacks to more than half of the 2 MiB.
        await expect(
          pullOf(
            'ok/zeros',
            [gzipLayer(await tarLayer([{ name: 'zeros', content: Buffer.alloc(8 * 1024 * 1024) }]))],
            store,
          ),
        ).rejects.toMatchObject({
          code: 'S102',
          retryable: true,
          message: expect.stringContaining("bytes free on the image cache's filesystem"),
        })
        execFileSync('mount', ['-o', 'remount,size=64m', cacheDir])
        const image = await store.pull(`${registry.host}/ok/zeros:1`)
        expect(fs.statSync(path.join(image.rootfs, 'zeros')).size).toBe(8 * 1024 * 1024)
      } finally {
        execFileSync('umount', ['-l', cacheDir])
      }
    },
  )
})
