/**
 * The layer extractor against hostile images, pulled from a real registry: nothing a layer
 * says may write, link, chmod or delete outside the image's rootfs, even through a symlink an
 * earlier layer planted; tampered blobs are refused before anything is stored.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ImageStore } from '../../lib/images/index.js'
import {
  blobGets,
  gzipLayer,
  plainLayer,
  pushBlob,
  pushImage,
  pushManifest,
  sha256,
  startRegistry,
  tarLayer,
  type Registry,
} from '../images/oci-registry.js'

let registry: Registry
let work: string
let outside: string

beforeAll(async () => {
  registry = await startRegistry()
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-oci-extract-'))
  outside = path.join(work, 'outside')
})

afterAll(async () => {
  await registry?.stop()
  fs.rmSync(work, { recursive: true, force: true })
})

function freshOutside(): void {
  fs.rmSync(outside, { recursive: true, force: true })
  fs.mkdirSync(path.join(outside, 'dir'), { recursive: true })
  fs.writeFileSync(path.join(outside, 'victim'), 'precious')
  fs.writeFileSync(path.join(outside, 'dir', 'keep'), 'precious')
  fs.chmodSync(path.join(outside, 'dir'), 0o755)
}

function outsideState(): string {
  const lines: string[] = []
  const walk = (dir: string) => {
    for (const name of fs.readdirSync(dir).sort()) {
      const p = path.join(dir, name)
      const st = fs.lstatSync(p)
      lines.push(
        `${path.relative(outside, p)} ${(st.mode & 0o7777).toString(8)} ${st.isFile() ? fs.readFileSync(p, 'utf8') : ''}`,
      )
      if (st.isDirectory()) walk(p)
    }
  }
  walk(outside)
  return lines.join('\n')
}

describe('OCI extraction', () => {
  it('oci extract: a symlink planted by layer 1 that layer 2 writes, links, chmods and whites out through is held inside the rootfs', async () => {
    freshOutside()
    const before = outsideState()
    const layer1 = plainLayer(
      await tarLayer([
        { name: 'etc/', type: 'directory' },
        { name: 'etc/passwd', content: 'root:x:0:0:root:/root:/bin/sh\n' },
        { name: 'abs', type: 'symlink', linkname: outside },
        { name: 'rel', type: 'symlink', linkname: `../../../../../../../../..${outside}` },
        { name: 'victimlink', type: 'symlink', linkname: path.join(outside, 'victim') },
        { name: 'dirlink', type: 'symlink', linkname: path.join(outside, 'dir') },
      ]),
    )
    const layer2 = gzipLayer(
      await tarLayer([
        { name: 'abs/pwned', content: 'x' },
        { name: 'rel/pwned', content: 'x' },
        { name: 'victimlink', content: 'overwritten' },
        { name: 'abs/.wh.victim' },
        { name: 'rel/dir/.wh.keep' },
        { name: 'abs/dir/.wh..wh..opq' },
        { name: 'hard', type: 'link', linkname: 'abs/pwned' },
        { name: 'dirlink/', type: 'directory', mode: 0o777 },
        { name: 'moded/', type: 'directory', mode: 0o777 },
        { name: 'moded', type: 'symlink', linkname: path.join(outside, 'dir') },
      ]),
    )
    await pushImage(registry, 'evil/escape', '1', [layer1, layer2])
    const store = new ImageStore({ cacheDir: path.join(work, 'cache-escape') })
    const image = await store.pull(`${registry.host}/evil/escape:1`)
    expect(outsideState()).toBe(before)
    const root = image.rootfs
    // What the layers meant happened inside the image, with the image as /.
    expect(fs.readFileSync(path.join(root, outside, 'pwned'), 'utf8')).toBe('x')
    expect(fs.lstatSync(path.join(root, 'victimlink')).isFile()).toBe(true)
    expect(fs.readFileSync(path.join(root, 'hard'), 'utf8')).toBe('x')
    expect(fs.lstatSync(path.join(root, 'dirlink')).isDirectory()).toBe(true)
    expect(fs.lstatSync(path.join(root, 'moded')).isSymbolicLink()).toBe(true)
  })

  it('oci extract: entries with .. and hard links out of the rootfs are refused, nothing is published', async () => {
    freshOutside()
    const before = outsideState()
    const store = new ImageStore({ cacheDir: path.join(work, 'cache-dotdot') })
    const dotdot = plainLayer(await tarLayer([{ name: `../../../../../../..${outside}/pwned`, content: 'x' }]))
    await pushImage(registry, 'evil/dotdot', '1', [dotdot])
    await expect(store.pull(`${registry.host}/evil/dotdot:1`)).rejects.toMatchObject({
      code: 'S102',
      message: expect.stringContaining('climbs with ..'),
    })
    const hard = plainLayer(
      await tarLayer([{ name: 'h', type: 'link', linkname: `../../../../../..${outside}/victim` }]),
    )
    await pushImage(registry, 'evil/hardlink', '1', [hard])
    await expect(store.pull(`${registry.host}/evil/hardlink:1`)).rejects.toMatchObject({ code: 'S102' })
    expect(outsideState()).toBe(before)
    expect(await store.list()).toEqual([])
  })

  it('oci extract: an opaque directory hides the lower layer, keeps its own layer; device nodes and xattrs are dropped and counted', async () => {
    const layer1 = plainLayer(
      await tarLayer([
        { name: 'data/', type: 'directory' },
        { name: 'data/old1', content: '1' },
        { name: 'data/sub/', type: 'directory' },
        { name: 'data/sub/old2', content: '2' },
        { name: 'gone', content: 'g' },
      ]),
    )
    const layer2 = plainLayer(
      await tarLayer([
        { name: 'data/new-before', content: 'n' },
        { name: 'data/.wh..wh..opq' },
        { name: 'data/new-after', content: 'm' },
        { name: '.wh.gone' },
        { name: 'dev-null', type: 'character-device' },
        { name: 'fifo', type: 'fifo' },
        { name: 'attr', content: 'a', pax: { 'SCHILY.xattr.security.capability': 'x' } },
      ]),
    )
    await pushImage(registry, 'test/opaque', '1', [layer1, layer2])
    const store = new ImageStore({ cacheDir: path.join(work, 'cache-opaque') })
    const image = await store.pull(`${registry.host}/test/opaque:1`)
    expect(fs.readdirSync(path.join(image.rootfs, 'data')).sort()).toEqual(['new-after', 'new-before'])
    expect(fs.existsSync(path.join(image.rootfs, 'gone'))).toBe(false)
    expect(fs.existsSync(path.join(image.rootfs, 'dev-null'))).toBe(false)
    expect(fs.readFileSync(path.join(image.rootfs, 'attr'), 'utf8')).toBe('a')
    expect(image.manifest.oci?.dropped).toEqual({ devices: 1, other: 1, xattrs: 1 })
  })

  it("oci extract: a decompression bomb and an entry flood are stopped at the store's bounds, nothing is published", async () => {
    const store = new ImageStore({
      cacheDir: path.join(work, 'cache-bomb'),
      unpackLimits: { maxBytes: 4 * 1024 * 1024, maxEntries: 500 },
    })
    const bomb = gzipLayer(await tarLayer([{ name: 'zeros', content: Buffer.alloc(24 * 1024 * 1024) }]))
    expect(bomb.blob.length).toBeLessThan(1024 * 1024)
    await pushImage(registry, 'evil/bomb', '1', [bomb])
    await expect(store.pull(`${registry.host}/evil/bomb:1`)).rejects.toMatchObject({
      code: 'S102',
      message: expect.stringContaining('unpacks to more than 4194304 bytes'),
    })
    const flood = gzipLayer(await tarLayer(Array.from({ length: 600 }, (_, i) => ({ name: `f${i}`, content: '' }))))
    await pushImage(registry, 'evil/flood', '1', [flood])
    await expect(store.pull(`${registry.host}/evil/flood:1`)).rejects.toMatchObject({
      code: 'S102',
      message: expect.stringContaining('more than 500 entries'),
    })
    expect(await store.list()).toEqual([])
    expect(
      fs.readdirSync(path.join(work, 'cache-bomb')).filter((n) => !['blobs', '.locks', 'refs'].includes(n)),
    ).toEqual([])
  })

  it('oci pull: a tampered blob is refused and never stored, and a layer that does not match its diff_id is not published', async () => {
    const store = new ImageStore({ cacheDir: path.join(work, 'cache-tamper') })
    // The registry serves what it stores: push a layer under the digest of other bytes by
    // writing the manifest with a wrong digest is refused by it, so tamper with its storage.
    const real = plainLayer(await tarLayer([{ name: 'f', content: 'real' }]))
    const pushed = await pushImage(registry, 'evil/tamper', '1', [real])
    const data = path.join(registry.dir, 'data', 'docker', 'registry', 'v2', 'blobs', 'sha256')
    const hex = sha256(real.blob).slice(7)
    const stored = path.join(data, hex.slice(0, 2), hex, 'data')
    const evil = await tarLayer([{ name: 'f', content: 'evil' }])
    expect(evil.length).toBe(real.blob.length)
    fs.writeFileSync(stored, evil)
    await expect(store.pull(`${registry.host}/evil/tamper:1`)).rejects.toMatchObject({
      code: 'S102',
      message: expect.stringContaining('does not match its content'),
    })
    const blobsDir = path.join(work, 'cache-tamper', 'blobs', 'sha256')
    const storedBlobs = fs.existsSync(blobsDir) ? fs.readdirSync(blobsDir) : []
    expect(storedBlobs).not.toContain(hex)
    expect(storedBlobs).toEqual([pushed.configDigest.slice(7)])
    expect(await store.list()).toEqual([])

    // A config whose diff_id does not match the (intact) layer: refused at unpacking.
    const layer = plainLayer(await tarLayer([{ name: 'g', content: 'g' }]))
    const lying = { ...layer, diffId: sha256('something else') }
    await pushImage(registry, 'evil/diffid', '1', [lying])
    await expect(store.pull(`${registry.host}/evil/diffid:1`)).rejects.toMatchObject({
      code: 'S102',
      message: expect.stringContaining('diff_id'),
    })
    expect(await store.list()).toEqual([])
    expect(fs.readdirSync(path.join(work, 'cache-tamper')).filter((n) => /^[0-9a-f]{64}$/.test(n))).toEqual([])
    void blobGets
    void pushBlob
    void pushManifest
  })
})
