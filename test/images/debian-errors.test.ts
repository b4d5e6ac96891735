/**
 * A Debian image build that fails, or is killed, leaves nothing behind (no image, no temporary
 * tree, no mount, no process) and says why: a package the archive does not have is named (and
 * found before the essential set is installed), a maintainer script that fails comes with its
 * package, its exit status and its output's tail.
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs/promises'
import path from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { ImageStore, type ProgressEvent } from '../../lib/images/index.js'
import { processesLeft } from '../helpers/runtime.js'
import { buildInChild, cacheEntries, tempDir } from './helpers.js'

const dirs: string[] = []
afterAll(async () => {
  for (const dir of dirs) await fs.rm(dir, { recursive: true, force: true })
})

async function freshCache(): Promise<string> {
  const dir = await tempDir('images-debian-errors')
  dirs.push(dir)
  return dir
}

/** Mount points of this host's mount namespace below `dir`. */
async function mountsBelow(dir: string): Promise<string[]> {
  const table = await fs.readFile('/proc/self/mountinfo', 'utf8')
  return table
    .split('\n')
    .map((line) => line.split(' ')[4] ?? '')
    .filter((mountPoint) => mountPoint.startsWith(dir))
}

/** Nothing of a build is left in `cacheDir`: no image, no name, no temporary tree, no mount, no process. */
async function expectNothingLeft(cacheDir: string): Promise<void> {
  const entries = await cacheEntries(cacheDir)
  expect(entries.images).toEqual([])
  expect(entries.tmp).toEqual([])
  expect(await fs.readdir(path.join(cacheDir, 'names')).catch(() => [])).toEqual([])
  expect(await mountsBelow(cacheDir)).toEqual([])
  expect(await processesLeft(cacheDir)).toEqual([])
}

/** A package whose postinst prints a line and exits 3. */
async function failingPackage(dir: string): Promise<string> {
  const root = path.join(dir, 'pkg')
  await fs.mkdir(path.join(root, 'DEBIAN'), { recursive: true })
  await fs.writeFile(
    path.join(root, 'DEBIAN/control'),
    'Package: krunbox-failing-postinst\nVersion: 1.0\nArchitecture: all\nMaintainer: krunbox tests <tests@krunbox.invalid>\nDescription: a package whose postinst fails\n',
  )
  await fs.writeFile(
    path.join(root, 'DEBIAN/postinst'),
    '#!/bin/sh\necho "krunbox-marker: the postinst went wrong" >&2\nexit 3\n',
    { mode: 0o755 },
  )
  const deb = path.join(dir, 'krunbox-failing-postinst_1.0_all.deb')
  execFileSync('dpkg-deb', ['--root-owner-group', '--build', root, deb], { stdio: 'ignore' })
  return deb
}

describe('failing Debian builds', () => {
  it('a package the archive does not have is S102 naming it, before the essential set is installed', async () => {
    const cacheDir = await freshCache()
    const events: ProgressEvent[] = []
    const store = new ImageStore({ cacheDir })
    const failure = store.register(
      'missing',
      { base: 'python', packages: ['krunbox-no-such-package'] },
      { onProgress: (e) => events.push(e) },
    )
    await expect(failure).rejects.toMatchObject({
      code: 'S102',
      message: expect.stringContaining('Unable to locate package krunbox-no-such-package'),
    })
    // The check runs once the essential set is unpacked, before dpkg installs it.
    expect(Math.max(...events.map((e) => e.percent))).toBeLessThan(57)
    await expectNothingLeft(cacheDir)
  }, 300_000)

  it('a maintainer script that fails is S102 with its package, exit status and output', async () => {
    const cacheDir = await freshCache()
    const deb = await failingPackage(cacheDir)
    const store = new ImageStore({ cacheDir })
    const failure = store.register('broken', { base: 'python', debs: [deb] })
    await expect(failure).rejects.toMatchObject({ code: 'S102' })
    const message = ((await failure.catch((e: unknown) => e)) as Error).message
    expect(message).toContain('dpkg: error processing package krunbox-failing-postinst (--configure):')
    expect(message).toContain('post-installation script subprocess returned error exit status 3')
    expect(message).toContain('krunbox-marker: the postinst went wrong')
    await fs.rm(deb)
    await fs.rm(path.join(cacheDir, 'pkg'), { recursive: true })
    await expectNothingLeft(cacheDir)
  }, 600_000)

  it('a build killed while dpkg installs leaves no mount on the host and no process', async () => {
    const cacheDir = await freshCache()
    const doomed = buildInChild(cacheDir, 'python')
    // Installing the essential set: /proc, /sys and /dev are mounted in the tree.
    await doomed.waitFor((e) => e.stage === 'extract' && e.percent >= 56)
    doomed.child.kill('SIGKILL')
    expect((await doomed.done).signal).toBe('SIGKILL')
    const [tmp] = (await cacheEntries(cacheDir)).tmp
    expect(tmp).toBeDefined()
    expect(await processesLeft(path.join(cacheDir, tmp))).toEqual([])
    expect(await mountsBelow(cacheDir)).toEqual([])
  }, 600_000)
})
