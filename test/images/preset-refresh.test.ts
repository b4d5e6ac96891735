/**
 * Keeping presets current: `krunbox images build [--force] [name]` checks the archive and
 * rebuilds only when it moved, or always with --force; a host whose apt sources name no Debian
 * archive still gets ids that follow the archive (the first build records the one mmdebstrap
 * used, later builds check it). Real builds of the small base preset, each in its own cache.
 */
import fs from 'node:fs/promises'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DEFAULT_SUITE, ImageStore } from '../../lib/images/index.js'
import { imageId, presetRecipe, sourceState } from '../../lib/images/recipe.js'
import { krunbox, privateCliEnv } from '../cli/helpers.js'
import { tempDir } from './helpers.js'

let work: string
beforeAll(async () => {
  work = await tempDir('preset-refresh')
})
afterAll(async () => {
  await fs.rm(work, { recursive: true, force: true })
})

describe('images build', () => {
  it('rebuilds only when the archive moved, always with --force; without a name it refreshes every built preset', async () => {
    const { env, home } = privateCliEnv({ XDG_CACHE_HOME: path.join(work, 'xdg-cache') })
    const manifestOf = async (id: string) =>
      JSON.parse(await fs.readFile(path.join(work, 'xdg-cache/krunbox/images', id, 'manifest.json'), 'utf8')) as {
        builtAt: string
      }
    try {
      const first = await krunbox(['images', 'build', 'base'], { env, timeoutMs: 170_000 })
      expect(first.code, first.stderr).toBe(0)
      const id = first.stdout.trim()
      expect(id).toMatch(/^[0-9a-f]{64}$/)
      const builtAt = (await manifestOf(id)).builtAt

      const again = await krunbox(['images', 'build', 'base'], { env, timeoutMs: 60_000 })
      expect(again.stdout.trim()).toBe(id)
      expect((await manifestOf(id)).builtAt).toBe(builtAt)

      const forced = await krunbox(['images', 'build', '--force', 'base'], { env, timeoutMs: 170_000 })
      expect(forced.code, forced.stderr).toBe(0)
      expect(forced.stdout.trim()).toBe(id)
      expect((await manifestOf(id)).builtAt > builtAt).toBe(true)

      const all = await krunbox(['images', 'build'], { env, timeoutMs: 60_000 })
      expect(all.code, all.stderr).toBe(0)
      expect(all.stdout).toBe(`base\t${id}\tcurrent\n`)
    } finally {
      await fs.rm(home, { recursive: true, force: true })
    }
  }, 400_000)

  it('on a host whose apt sources name no Debian archive, the id follows what the build fetched and the next build checks it', async () => {
    const cacheDir = path.join(work, 'foreign-cache')
    const sources = path.join(work, 'ubuntu.sources')
    // Nothing listens on port 9: the host's only archive answers nothing for the suite.
    await fs.writeFile(
      sources,
      'Types: deb\nURIs: http://127.0.0.1:9/ubuntu\nSuites: noble noble-updates noble-security\nComponents: main\n',
    )
    const store = new ImageStore({ cacheDir, aptSources: [sources] })
    const image = await store.build('base')
    expect(image.built).toBe(true)
    const archive = image.manifest.archive
    expect(archive?.sources.map((s) => s.dist)).toEqual(expect.arrayContaining([DEFAULT_SUITE]))
    expect(archive?.fetched.length).toBe(archive?.sources.length)
    expect(image.id).toBe(imageId(presetRecipe('base', DEFAULT_SUITE), sourceState(archive?.fetched ?? [], [])))

    const again = await new ImageStore({ cacheDir, aptSources: [sources] }).build('base')
    expect(again.built).toBe(false)
    expect(again.id).toBe(image.id)
  }, 300_000)

  it('an archive the last build used that does not answer (offline) is a quick retryable S102; the built image stays', async () => {
    const cacheDir = path.join(work, 'offline-cache')
    const id = 'f'.repeat(64)
    await fs.mkdir(path.join(cacheDir, id, 'rootfs'), { recursive: true })
    await fs.mkdir(path.join(cacheDir, 'names'), { recursive: true })
    // A base image whose build used an archive that nothing serves now (nothing listens on port 9).
    const manifest = {
      schema: 1,
      name: 'base',
      id,
      kind: 'preset',
      treeDigest: 'sha256:x',
      archive: { sources: [{ uri: 'http://127.0.0.1:9/debian', dist: DEFAULT_SUITE }], fetched: [] },
    }
    await fs.writeFile(path.join(cacheDir, id, 'manifest.json'), JSON.stringify(manifest))
    await fs.writeFile(
      path.join(cacheDir, 'names', 'base.json'),
      JSON.stringify({ name: 'base', id, kind: 'preset', updatedAt: new Date().toISOString() }),
    )
    const noSources = path.join(work, 'none.list')
    await fs.writeFile(noSources, '')
    const error = await new ImageStore({ cacheDir, aptSources: [noSources] }).build('base').catch((err: unknown) => err)
    expect(error).toMatchObject({ code: 'S102', retryable: true })
    expect((error as Error).message).toContain('tried http://127.0.0.1:9/debian')
    expect(await fs.readdir(cacheDir)).toEqual(expect.arrayContaining([id, 'names']))
    expect((await fs.readdir(cacheDir)).filter((e) => e.startsWith('.tmp-'))).toEqual([])
  })
})
