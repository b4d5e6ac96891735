/**
 * A Debian preset built in unshare mode (what non-root users get: every maintainer script runs
 * as root of a user namespace, the tree comes out as a tarball extracted as the user) is the
 * same tree as the root build, with the same id; or the build names what the host lacks.
 */
import fs from 'node:fs/promises'
import { afterAll, describe, expect, it } from 'vitest'
import { ImageStore } from '../../lib/images/index.js'
import { missingPrerequisites } from '../../lib/images/mmdebstrap.js'
import { runInImage, sharedStore, tempDir } from './helpers.js'

const dirs: string[] = []
afterAll(async () => {
  for (const dir of dirs) await fs.rm(dir, { recursive: true, force: true })
})

describe('a Debian preset in unshare build mode', () => {
  it('is the tree and the id of the root build, or names what is missing', async () => {
    const cacheDir = await tempDir('images-debian-unshare')
    dirs.push(cacheDir)
    const store = new ImageStore({ cacheDir, buildMode: 'unshare' })
    const missing = await missingPrerequisites('unshare')
    if (missing.length > 0) {
      await expect(store.build('python')).rejects.toMatchObject({
        code: 'S102',
        message: expect.stringContaining(missing[0]),
      })
      return
    }
    const [unshared, rooted] = await Promise.all([store.build('python'), sharedStore().build('python')])
    expect(unshared.manifest.buildMode).toBe('unshare')
    expect(unshared.manifest.treeDigest).toBe(rooted.manifest.treeDigest)
    expect(unshared.id).toBe(rooted.id)
    const run = runInImage(unshared.rootfs, ['/bin/sh', '-c', 'dpkg --audit && readlink -f /usr/bin/awk'])
    expect(run.stderr).toBe('')
    expect(run.stdout).toBe('/usr/bin/mawk\n')
  }, 900_000)
})
