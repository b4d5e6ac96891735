/** The unshare build mode (what non-root users get): same tree as a root build, or a clear S102. */
import fs from 'node:fs/promises'
import { afterAll, describe, expect, it } from 'vitest'
import { ImageStore } from '../../lib/images/index.js'
import { missingPrerequisites } from '../../lib/images/mmdebstrap.js'
import { runInImage, sharedStore, tempDir } from './helpers.js'

const dirs: string[] = []
afterAll(async () => {
  for (const dir of dirs) await fs.rm(dir, { recursive: true, force: true })
})

describe('unshare build mode', () => {
  it('builds the same tree as root mode, or names what is missing', async () => {
    const cacheDir = await tempDir('images-unshare')
    dirs.push(cacheDir)
    const store = new ImageStore({ cacheDir, buildMode: 'unshare' })
    const missing = await missingPrerequisites('unshare')
    if (missing.length > 0) {
      await expect(store.build('base')).rejects.toMatchObject({
        code: 'S102',
        message: expect.stringContaining(missing[0]),
      })
      return
    }
    const unshared = await store.build('base')
    const rooted = await sharedStore().build('base')
    expect(unshared.manifest.buildMode).toBe('unshare')
    expect(unshared.manifest.treeDigest).toBe(rooted.manifest.treeDigest)
    expect(unshared.id).toBe(rooted.id) // the mode is not part of the recipe: same content, same id
    expect(runInImage(unshared.rootfs, ['/bin/sh', '-c', 'echo ok']).stdout).toBe('ok\n')
  }, 180_000)
})
