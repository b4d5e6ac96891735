/**
 * Every image a sandbox can name is pinned to the version it resolved to by `<image>@<id>`
 * (lib/images/pin.ts), the id create reported as imageVersion: a preset, a registered or
 * customImages name, a pulled reference and a customImages name of a reference. A pin boots
 * that version after its name moved, never builds nor pulls, and is S101 naming it when the
 * cache does not hold that version or holds it as another image's.
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ImageStore } from '../../lib/images/index.js'
import { testRuntime } from '../helpers/runtime.js'
import { tempDir } from './helpers.js'
import {
  gzipLayer,
  plainLayer,
  pushImage,
  startRegistry,
  tarDirectory,
  tarLayer,
  type Registry,
} from './oci-registry.js'

let work: string
let baseRootfs: string
let registry: Registry

/** A copy of the base image whose /etc/marker says which build it is. */
function tree(marker: string): string {
  const dir = path.join(work, `tree-${marker}`)
  execFileSync('cp', ['-a', baseRootfs, dir])
  fs.writeFileSync(path.join(dir, 'etc/marker'), marker)
  return dir
}

beforeAll(async () => {
  work = await tempDir('pinned')
  baseRootfs = (await new ImageStore().resolve('base')).rootfs
  registry = await startRegistry()
}, 120_000)

afterAll(async () => {
  await registry?.stop()
  if (work) fs.rmSync(work, { recursive: true, force: true })
})

const MISSING = 'a'.repeat(64)

describe('images pinned to the version they resolved to', () => {
  it('a preset: base@<its imageVersion> boots that build, and a version the cache lacks is S101 naming it', async () => {
    const rt = testRuntime()
    try {
      const sb = await rt.create({ image: 'base' })
      await sb.stop()
      const pinned = await rt.create({ image: `base@${sb.imageVersion}` })
      expect([pinned.image, pinned.imageVersion]).toEqual([`base@${sb.imageVersion}`, sb.imageVersion])
      expect((await pinned.exec('echo', ['pinned'])).stdout).toBe('pinned\n')
      await pinned.stop()
      await expect(rt.create({ image: `base@${MISSING}` })).rejects.toMatchObject({
        code: 'S101',
        message: expect.stringContaining(`"base@${MISSING}" is not in the cache`),
      })
    } finally {
      await rt.close()
    }
  }, 60_000)

  it("a registered and a customImages name: the pinned version boots after the name moved; another image's version is refused", async () => {
    const cacheDir = path.join(work, 'cache-names')
    const customImages = { configured: tree('configured') }
    const rt = testRuntime({ cacheDir, customImages })
    const allowing = testRuntime({ cacheDir, customImages, imageAllowlist: ['configured'] })
    try {
      const a = await rt.images.register('app', tree('a'))
      await rt.images.register('app', tree('b'))
      const old = await rt.create({ image: `app@${a.id}` })
      expect(old.imageVersion).toBe(a.id)
      expect((await old.exec('cat', ['/etc/marker'])).stdout).toBe('a')
      await old.stop()
      const now = await rt.create({ image: 'app' })
      expect((await now.exec('cat', ['/etc/marker'])).stdout).toBe('b')
      await now.stop()
      const configured = await rt.create({ image: 'configured' })
      await configured.stop()
      const again = await allowing.create({ image: `configured@${configured.imageVersion}` })
      expect((await again.exec('cat', ['/etc/marker'])).stdout).toBe('configured')
      await again.stop()
      // A pin never lends a name to another image's build: the allowlist and caps go by the name.
      await expect(allowing.create({ image: `configured@${a.id}` })).rejects.toMatchObject({
        code: 'S101',
        message: expect.stringContaining(`"configured@${a.id}" is not a version of configured`),
      })
      await expect(allowing.create({ image: `app@${a.id}` })).rejects.toMatchObject({ code: 'S100' })
    } finally {
      await Promise.all([rt.close(), allowing.close()])
    }
  }, 90_000)

  it('a pulled reference and a customImages name of one: the version pulled before the tag moved boots, never pulled again', async () => {
    const base = gzipLayer(tarDirectory(baseRootfs))
    const marker = async (text: string) => plainLayer(await tarLayer([{ name: 'etc/marker', content: text }]))
    await pushImage(registry, 'pin/app', '1', [base, await marker('v1')])
    const ref = `${registry.host}/pin/app:1`
    const cacheDir = path.join(work, 'cache-refs')
    const rt = testRuntime({ cacheDir, customImages: { mine: ref } })
    try {
      const first = await rt.create({ image: ref })
      await first.stop()
      await pushImage(registry, 'pin/app', '1', [base, await marker('v2')])
      await rt.images.pull(ref, { policy: 'always' })
      for (const image of [`${ref}@${first.imageVersion}`, `mine@${first.imageVersion}`]) {
        const sb = await rt.create({ image })
        expect([image, (await sb.exec('cat', ['/etc/marker'])).stdout]).toEqual([image, 'v1'])
        await sb.stop()
      }
      const moved = await rt.create({ image: ref })
      expect((await moved.exec('cat', ['/etc/marker'])).stdout).toBe('v2')
      await moved.stop()
      await expect(rt.create({ image: `${ref}@${MISSING}` })).rejects.toMatchObject({ code: 'S101' })
    } finally {
      await rt.close()
    }
  }, 120_000)
})
