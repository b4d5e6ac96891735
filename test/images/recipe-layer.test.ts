/**
 * Layers, not copies: a recipe on a Debian preset is apt's layer over the preset's tree, and its
 * image links every file the layer did not touch (lib/images/layer-build.ts). Its own bytes are
 * its packages'; what it adds works beside the preset's (a command, a Python package seen by the
 * default virtual environment), and dpkg knows both.
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs/promises'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { BuildResult } from '../../lib/images/index.js'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'
import { ImageStore } from '../../lib/images/index.js'
import { SHARED_CACHE, sharedStore, tempDir } from './helpers.js'

const NAME = 'layered-jq-six'

let preset: BuildResult
let layer: BuildResult
let rt: Runtime
let sb: Sandbox

beforeAll(async () => {
  preset = await sharedStore().build('python')
  layer = await sharedStore().register(NAME, { base: 'python', packages: ['jq', 'python3-six'] })
  rt = testRuntime({ cacheDir: SHARED_CACHE })
  sb = await rt.create({ image: NAME, driver: 'namespace' })
}, 600_000)

afterAll(async () => {
  await rt?.close()
})

/** Bytes of regular files under root, those also in `shared` (same inode) counted apart. */
async function bytesOf(root: string, shared: Set<number>): Promise<{ own: number; linked: number }> {
  const total = { own: 0, linked: 0 }
  const walk = async (dir: string): Promise<void> => {
    for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
      const p = path.join(dir, entry.name)
      if (entry.isDirectory()) await walk(p)
      else if (entry.isFile()) {
        const st = await fs.lstat(p)
        if (shared.has(st.ino)) total.linked += st.size
        else total.own += st.size
      }
    }
  }
  await walk(root)
  return total
}

async function inodesOf(root: string): Promise<Set<number>> {
  const inodes = new Set<number>()
  const walk = async (dir: string): Promise<void> => {
    for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
      const p = path.join(dir, entry.name)
      if (entry.isDirectory()) await walk(p)
      else if (entry.isFile()) inodes.add((await fs.lstat(p)).ino)
    }
  }
  await walk(root)
  return inodes
}

describe('a recipe built as a layer over its preset', () => {
  it("costs its own packages' bytes: the rest of its tree is the preset's files, linked", async () => {
    const bytes = await bytesOf(layer.rootfs, await inodesOf(preset.rootfs))
    expect(bytes.linked).toBeGreaterThan(0.9 * preset.manifest.sizeBytes)
    // jq, libjq, libonig and six, dpkg's and apt's records: a few MB, not a second preset.
    expect(bytes.own).toBeLessThan(0.1 * preset.manifest.sizeBytes)
    expect(bytes.own + bytes.linked).toBe(layer.manifest.sizeBytes)
  })

  it("runs the layer's command and the preset's side by side", async () => {
    const r = await sb.exec('sh', ['-c', `echo '{"a": 41}' | jq '.a + 1' && python3 --version`])
    expect(r.exitCode, r.stderr).toBe(0)
    expect(r.stdout).toMatch(/^42\nPython 3\.13\./)
  })

  it("the default virtual environment sees the layer's Debian Python package", async () => {
    const r = await sb.exec('sh', [
      '-c',
      'command -v python && python -c "import six, sys; print(sys.prefix, six.__name__)"',
    ])
    expect(r.exitCode, r.stderr).toBe(0)
    expect(r.stdout).toBe('/opt/venv/bin/python\n/opt/venv six\n')
  })

  it("dpkg lists the preset's packages and the layer's; the layer's build records the preset's archive", async () => {
    const names = layer.manifest.packages.map((p) => p.name)
    expect(names).toEqual(expect.arrayContaining(['jq', 'python3-six', ...preset.manifest.packages.map((p) => p.name)]))
    const r = await sb.exec('dpkg-query', ['-W', '-f', '${Status}\n', 'jq', 'python3-six', 'python3'])
    expect(r.stdout).toBe('install ok installed\n'.repeat(3))
    expect(layer.manifest.archive?.sources).toEqual(preset.manifest.archive?.sources)
  })

  it('keeps working once its preset is removed', async () => {
    // A cache of its own whose python preset is the shared one's, linked (no build, no copy).
    const cacheDir = await tempDir('recipe-layer-own')
    try {
      execFileSync('cp', ['-al', preset.rootfs.replace(/\/rootfs$/, ''), cacheDir])
      await fs.mkdir(path.join(cacheDir, 'names'))
      await fs.copyFile(path.join(SHARED_CACHE, 'names/python.json'), path.join(cacheDir, 'names/python.json'))
      const store = new ImageStore({ cacheDir })
      const own = await store.register('six-only', { base: 'python', packages: ['python3-six'] })
      expect(await store.remove('python')).toBe(true)
      await expect(fs.stat(path.join(cacheDir, preset.id))).rejects.toMatchObject({ code: 'ENOENT' })
      const rtOwn = testRuntime({ cacheDir })
      try {
        const sbOwn = await rtOwn.create({ image: 'six-only', driver: 'namespace' })
        const r = await sbOwn.exec('python3', ['-c', 'import six; print(six.__name__)'])
        expect(r.stdout, r.stderr).toBe('six\n')
        expect(await store.verify('six-only')).toBe(true)
        expect(own.built).toBe(true)
      } finally {
        await rtOwn.close()
      }
    } finally {
      await fs.rm(cacheDir, { recursive: true, force: true })
    }
  }, 300_000)

  it('64 registrations of one new recipe at once build it once; two recipes build over the preset side by side', async () => {
    // Recipes no other test builds (an id is its content's, whatever its name).
    const recipe = { base: 'python', packages: ['python3-certifi'] }
    const name = `layer-64-${process.pid}`
    const other = `layer-other-${process.pid}`
    try {
      const [results, second] = await Promise.all([
        Promise.all(Array.from({ length: 64 }, () => sharedStore().register(name, recipe))),
        sharedStore().register(other, { base: 'python', packages: ['python3-idna'] }),
      ])
      // One build: one id, one build time, and it was this test's (callers in one process may share its result).
      expect(new Set(results.map((r) => r.id)).size).toBe(1)
      expect(new Set(results.map((r) => r.manifest.builtAt)).size).toBe(1)
      expect(results.some((r) => r.built)).toBe(true)
      expect(second.id).not.toBe(results[0].id)
      const names = (r: BuildResult) => r.manifest.packages.map((p) => p.name)
      expect(names(results[0])).toContain('python3-certifi')
      expect(names(second)).toContain('python3-idna')
      expect(names(second)).not.toContain('python3-certifi')
      expect(await sharedStore().verify(name)).toBe(true)
      expect(await sharedStore().verify('python')).toBe(true)
    } finally {
      for (const n of [name, other])
        await sharedStore()
          .remove(n)
          .catch(() => false)
    }
  }, 300_000)
})
