/**
 * autoInstall: false builds nothing (the seed's auto_install): an unbuilt preset, and a
 * customImages directory not registered yet, are S101 naming the image, and the cache is left
 * as it was; once the image is in the cache it boots. (References: test/images/oci-boot.test.ts.)
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ImageStore } from '../../lib/images/index.js'
import { testRuntime } from '../helpers/runtime.js'
import { cacheEntries, tempDir } from './helpers.js'

let work: string

beforeAll(async () => {
  work = await tempDir('auto-install')
})

afterAll(() => {
  if (work) fs.rmSync(work, { recursive: true, force: true })
})

describe('autoInstall: false', () => {
  it('an unbuilt preset or customImages directory is S101 naming it, nothing is built; a registered one boots', async () => {
    const mine = path.join(work, 'mine')
    execFileSync('cp', ['-a', (await new ImageStore().resolve('base')).rootfs, mine])
    const cacheDir = path.join(work, 'cache')
    const rt = testRuntime({ cacheDir, autoInstall: false, customImages: { mine } })
    try {
      for (const image of ['base', 'python'])
        await expect(rt.create({ image })).rejects.toMatchObject({
          code: 'S101',
          message: expect.stringContaining(
            `image "${image}" is not built and the policy is never (autoInstall: false)`,
          ),
        })
      await expect(rt.create({ image: 'mine' })).rejects.toMatchObject({
        code: 'S101',
        message: expect.stringContaining('image "mine" of customImages is not in the cache and autoInstall is false'),
      })
      expect(await cacheEntries(cacheDir)).toEqual({ images: [], tmp: [], trash: [] })
      await rt.images.register('mine', mine)
      const sb = await rt.create({ image: 'mine' })
      expect((await sb.exec('echo', ['registered'])).stdout).toBe('registered\n')
      await sb.stop()
    } finally {
      await rt.close()
    }
  }, 120_000)
})
