/**
 * A layer cannot fill the host's disk nor keep a set-id file there. Runs of zeros are written as
 * holes (a 101 KB zstd layer of zeros wrote 3.2 GB of real blocks); a layer that expands more
 * than 1024 times past its first GiB is refused as a bomb before it is all unpacked; what the
 * layers unpack to is bounded on their whole uncompressed stream (zero padding after the end of
 * a tar included), and what a refused unpack wrote is removed. setuid and setgid bits are not
 * stored (the sticky bit is). The bound tied to the free space is attacked in
 * oci-unpack-retry.test.ts (it needs a small filesystem mounted).
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ImageStore } from '../../lib/images/index.js'
import { gzipLayer, sha256, tarLayer } from '../images/oci-registry.js'
import { writeLayout, zeroBombLayer, zstd } from '../images/oci-layout.js'

let work: string

beforeAll(() => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-oci-unpack-bounds-'))
})

afterAll(() => {
  fs.rmSync(work, { recursive: true, force: true })
})

const MiB = 1024 * 1024

/** Build directories and trash an unpack left in the cache (blobs, refs and locks stay). */
function leftovers(cacheDir: string): string[] {
  return fs.readdirSync(cacheDir).filter((n) => n.startsWith('.') && !['.locks'].includes(n))
}

describe('OCI unpack bounds', () => {
  it('oci unpack: runs of zeros in a layer are holes on the host, the content unchanged', async () => {
    const content = Buffer.concat([
      Buffer.alloc(MiB, 'a'),
      Buffer.alloc(16 * MiB),
      Buffer.alloc(MiB, 'b'),
      Buffer.alloc(8 * MiB),
    ])
    const layout = writeLayout(path.join(work, 'holes'), [gzipLayer(await tarLayer([{ name: 'sparse', content }]))])
    const image = await new ImageStore({ cacheDir: path.join(work, 'cache-holes') }).import(layout, { name: 'holes' })
    const file = path.join(image.rootfs, 'sparse')
    const st = fs.statSync(file)
    expect(st.size).toBe(content.length)
    expect(sha256(fs.readFileSync(file))).toBe(sha256(content))
    // The two MiB of data, not the 24 MiB of zeros.
    expect(st.blocks * 512).toBeLessThan(4 * MiB)
  })

  it('oci unpack: setuid and setgid bits of files and directories are not stored on the host; the sticky bit is', async () => {
    const layout = writeLayout(path.join(work, 'setid'), [
      gzipLayer(
        await tarLayer([
          { name: 'bin/', type: 'directory' },
          { name: 'bin/su', content: '#!/bin/sh\n', mode: 0o4755 },
          { name: 'bin/wall', content: '#!/bin/sh\n', mode: 0o2755 },
          { name: 'bin/both', content: '#!/bin/sh\n', mode: 0o6711 },
          { name: 'var/mail/', type: 'directory', mode: 0o2775 },
          { name: 'tmp/', type: 'directory', mode: 0o1777 },
        ]),
      ),
    ])
    const image = await new ImageStore({ cacheDir: path.join(work, 'cache-setid') }).import(layout, { name: 'setid' })
    const mode = (p: string) => fs.lstatSync(path.join(image.rootfs, p)).mode & 0o7777
    expect(mode('bin/su')).toBe(0o755)
    expect(mode('bin/wall')).toBe(0o755)
    expect(mode('bin/both')).toBe(0o711)
    expect(mode('var/mail')).toBe(0o775)
    expect(mode('tmp')).toBe(0o1777)
  })

  it('oci unpack: a zstd layer of a few KB that unpacks to more than a GiB of zeros is refused as a bomb, nothing left', async () => {
    const bomb = zeroBombLayer(1024 * MiB + 64 * MiB)
    expect(bomb.blob.length).toBeLessThan(256 * 1024)
    const layout = writeLayout(path.join(work, 'bomb'), [bomb])
    const cacheDir = path.join(work, 'cache-bomb')
    const store = new ImageStore({ cacheDir })
    await expect(store.import(layout, { name: 'bomb' })).rejects.toMatchObject({
      code: 'S102',
      retryable: false,
      message: expect.stringContaining('more than 1024 times (a decompression bomb)'),
    })
    expect(await store.list()).toEqual([])
    expect(leftovers(cacheDir)).toEqual([])
  })

  it("oci unpack: zero padding after a tar's end counts toward the bound and is refused with it", async () => {
    const tar = await tarLayer([{ name: 'small', content: 'x' }])
    const padded = Buffer.concat([tar, Buffer.alloc(16 * MiB)])
    const layer = {
      blob: zstd(padded),
      diffId: sha256(padded),
      mediaType: 'application/vnd.oci.image.layer.v1.tar+zstd',
    }
    const layout = writeLayout(path.join(work, 'padded'), [layer])
    const cacheDir = path.join(work, 'cache-padded')
    const store = new ImageStore({ cacheDir, unpackLimits: { maxBytes: 4 * MiB } })
    await expect(store.import(layout, { name: 'padded' })).rejects.toMatchObject({
      code: 'S102',
      retryable: false,
      message: expect.stringContaining(`unpacks to more than ${4 * MiB} bytes`),
    })
    expect(await store.list()).toEqual([])
    expect(leftovers(cacheDir)).toEqual([])
  })
})
