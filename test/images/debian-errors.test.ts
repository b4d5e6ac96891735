/**
 * A Debian image build that fails, or is killed, leaves nothing behind (no image, no temporary
 * tree, no mount, no process) and says why: a package the archive does not have is named (and
 * found before anything is unpacked), a maintainer script that fails comes with its package, its
 * exit status and its output's tail. Recipes are layers over their built preset; the preset's own
 * build (mmdebstrap) is killed in a cache of its own.
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs/promises'
import path from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import type { ProgressEvent } from '../../lib/images/index.js'
import { processesLeft } from '../helpers/runtime.js'
import { buildInChild, cacheEntries, SHARED_CACHE, sharedStore, tempDir } from './helpers.js'

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

/** What a failed recipe build on the shared cache may not leave: its name, an image of it, a temporary tree of this process, a process. */
async function expectNoTraceOf(name: string): Promise<void> {
  const entries = await cacheEntries(SHARED_CACHE)
  expect(entries.tmp.filter((t) => t.startsWith(`.tmp-${process.pid}-`))).toEqual([])
  expect(await fs.readdir(path.join(SHARED_CACHE, 'names'))).not.toContain(`${name}.json`)
  for (const id of entries.images) {
    const manifest = await fs.readFile(path.join(SHARED_CACHE, id, 'manifest.json'), 'utf8').catch(() => '{}')
    expect((JSON.parse(manifest) as { name?: string }).name).not.toBe(name)
  }
  expect(await mountsBelow(SHARED_CACHE)).toEqual([])
  expect(await processesLeft(SHARED_CACHE)).toEqual([])
}

describe('failing Debian builds', () => {
  // A recipe on a built preset is a layer over it (lib/images/layer-build.ts): these run on the
  // shared cache, whose python preset is built once.
  it('a package the archive does not have is S102 naming it, before anything is unpacked', async () => {
    await sharedStore().build('python')
    const events: ProgressEvent[] = []
    const failure = sharedStore().register(
      'missing-package',
      { base: 'python', packages: ['krunbox-no-such-package'] },
      { onProgress: (e) => events.push(e) },
    )
    await expect(failure).rejects.toMatchObject({
      code: 'S102',
      message: expect.stringContaining('Unable to locate package krunbox-no-such-package'),
    })
    expect(events.filter((e) => e.stage === 'extract')).toEqual([])
    await expectNoTraceOf('missing-package')
  }, 300_000)

  it('a maintainer script that fails is S102 with its package, exit status and output', async () => {
    const dir = await freshCache()
    const deb = await failingPackage(dir)
    const failure = sharedStore().register('broken-postinst', { base: 'python', debs: [deb] })
    await expect(failure).rejects.toMatchObject({ code: 'S102' })
    const message = ((await failure.catch((e: unknown) => e)) as Error).message
    expect(message).toContain('dpkg: error processing package krunbox-failing-postinst (--configure):')
    expect(message).toContain('post-installation script subprocess returned error exit status 3')
    expect(message).toContain('krunbox-marker: the postinst went wrong')
    await expectNoTraceOf('broken-postinst')
  }, 600_000)

  it('a recipe layer killed while dpkg installs leaves no mount and no process, and the next build sweeps it', async () => {
    await sharedStore().build('python')
    const doomed = buildInChild(SHARED_CACHE, 'killed-layer', { base: 'python', packages: ['python3-six'] })
    await doomed.waitFor((e) => e.stage === 'extract')
    const { pid } = doomed.child
    doomed.child.kill('SIGKILL')
    expect((await doomed.done).signal).toBe('SIGKILL')
    const left = (await cacheEntries(SHARED_CACHE)).tmp.filter((t) => t.startsWith(`.tmp-${pid}-`))
    expect(left).toHaveLength(1)
    expect(await processesLeft(path.join(SHARED_CACHE, left[0]))).toEqual([])
    // The overlay lived in the build's own mount namespace: no mount of it is anywhere.
    const everywhere = await Promise.all(
      (await fs.readdir('/proc'))
        .filter((p) => /^\d+$/.test(p))
        .map((p) => fs.readFile(`/proc/${p}/mountinfo`, 'utf8').catch(() => '')),
    )
    expect(everywhere.filter((table) => table.includes(left[0]))).toEqual([])
    const rebuilt = await sharedStore().register('killed-layer', { base: 'python', packages: ['python3-six'] })
    expect(rebuilt.built).toBe(true)
    expect((await cacheEntries(SHARED_CACHE)).tmp).not.toContain(left[0])
    await sharedStore().remove('killed-layer')
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
