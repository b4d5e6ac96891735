/** Builds racing each other, killed half way, and cleaning up after themselves. */
import fs from 'node:fs/promises'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { candidateUris, readAptSources } from '../../lib/images/debian-archive.js'
import { DEFAULT_SUITE, ImageStore } from '../../lib/images/index.js'
import type { ProgressEvent } from '../../lib/images/index.js'
import { buildInChild, cacheEntries, isMonotonic, sharedStore, tempDir } from './helpers.js'

const cleanups: string[] = []
afterEach(async () => {
  for (const dir of cleanups.splice(0)) await fs.rm(dir, { recursive: true, force: true })
})

async function freshCache(): Promise<string> {
  const dir = await tempDir('images-cache')
  cleanups.push(dir)
  return dir
}

/** Processes whose command line mentions `needle` (other than this one). */
async function processesMentioning(needle: string): Promise<number[]> {
  const pids: number[] = []
  for (const entry of await fs.readdir('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue
    const cmdline = await fs.readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '')
    if (cmdline.includes(needle)) pids.push(Number(entry))
  }
  return pids
}

describe('image build lifecycle', () => {
  it('two processes building the same image produce one image, built once', async () => {
    const cacheDir = await freshCache()
    const first = buildInChild(cacheDir, 'base')
    const second = buildInChild(cacheDir, 'base')
    const [a, b] = await Promise.all([first.done, second.done])
    expect(a.code, a.stderr).toBe(0)
    expect(b.code, b.stderr).toBe(0)
    expect(a.result?.id).toBe(b.result?.id)
    expect([a.result?.built, b.result?.built].sort()).toEqual([false, true])
    const entries = await cacheEntries(cacheDir)
    expect(entries.images).toEqual([a.result?.id])
    expect(entries.tmp).toEqual([])
    expect(await fs.readdir(path.join(cacheDir, '.locks'))).toEqual([])
    // Both report a finished build.
    expect(first.events.at(-1)).toEqual({ stage: 'finalize', percent: 100 })
    expect(second.events.at(-1)).toEqual({ stage: 'finalize', percent: 100 })
  }, 180_000)

  it('a build killed half way leaves no image, and the next build sweeps it and succeeds', async () => {
    const cacheDir = await freshCache()
    const doomed = buildInChild(cacheDir, 'base')
    await doomed.waitFor((e) => e.stage === 'download')
    doomed.child.kill('SIGKILL')
    const exit = await doomed.done
    expect(exit.signal).toBe('SIGKILL')

    const left = await cacheEntries(cacheDir)
    expect(left.images).toEqual([])
    expect(left.tmp).toHaveLength(1)
    expect(await fs.readdir(path.join(cacheDir, 'names')).catch(() => [])).toEqual([])
    // The lock of the killed builder is still there; it must not block the next build.
    expect((await fs.readdir(path.join(cacheDir, '.locks'))).length).toBe(1)
    // mmdebstrap and its children died with the builder instead of writing on.
    const tmpPath = path.join(cacheDir, left.tmp[0])
    const deadline = Date.now() + 5000
    while ((await processesMentioning(tmpPath)).length > 0 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 100))
    expect(await processesMentioning(tmpPath)).toEqual([])

    const events: ProgressEvent[] = []
    const store = new ImageStore({ cacheDir })
    const image = await store.build('base', { onProgress: (e) => events.push(e) })
    expect(image.built).toBe(true)
    const after = await cacheEntries(cacheDir)
    expect(after.images).toEqual([image.id])
    expect(after.tmp).toEqual([])
    expect(await fs.readdir(path.join(cacheDir, '.locks'))).toEqual([])
    expect(await store.verify('base')).toBe(true)

    // Progress of a cold build: every stage of a preset build, monotonic, ending at 100.
    expect(isMonotonic(events)).toBe(true)
    expect(events[0].percent).toBe(0)
    expect(events.at(-1)).toEqual({ stage: 'finalize', percent: 100 })
    expect(new Set(events.map((e) => e.stage))).toEqual(new Set(['resolve', 'download', 'extract', 'trim', 'finalize']))
  }, 180_000)

  it('ids follow the archive state; resolve keeps a built preset, build picks up the new state', async () => {
    const cacheDir = await freshCache()
    // Two real archive states: the suite alone, then with its updates and security dists
    // (the archive's URIs come from this host's apt sources, as the store reads them).
    const suiteOnly = path.join(cacheDir, 'suite-only.list')
    const [uri] = candidateUris(DEFAULT_SUITE, await readAptSources(), [])
    expect(uri, `this host has no apt source that may serve ${DEFAULT_SUITE}`).toBeDefined()
    await fs.writeFile(suiteOnly, `deb ${uri} ${DEFAULT_SUITE} main\n`)
    const store = new ImageStore({ cacheDir, aptSources: [suiteOnly] })

    // Two builds of one image in one process share the build.
    const [a, b] = await Promise.all([store.build('base'), store.build('base')])
    expect(a.id).toBe(b.id)
    expect([a.built, b.built].sort()).toEqual([false, true])
    expect(a.manifest.archive?.sources).toEqual([{ uri, dist: DEFAULT_SUITE }])
    expect(a.manifest.archive?.fetched).toHaveLength(1)

    const moved = new ImageStore({ cacheDir })
    const started = performance.now()
    expect((await moved.resolve('base')).id).toBe(a.id)
    expect(performance.now() - started).toBeLessThan(1000)
    const rebuilt = await moved.build('base')
    expect(rebuilt.built).toBe(true)
    expect(rebuilt.id).not.toBe(a.id)
    expect(rebuilt.manifest.archive?.fetched.length).toBeGreaterThan(1)
    expect((await moved.resolve('base')).id).toBe(rebuilt.id)
    expect(await moved.prune()).toEqual([a.id])

    // force rebuilds in place.
    const forced = await moved.build('base', { force: true })
    expect(forced.built).toBe(true)
    expect(forced.id).toBe(rebuilt.id)
    expect(forced.manifest.builtAt > rebuilt.manifest.builtAt).toBe(true)
    expect((await cacheEntries(cacheDir)).images).toEqual([rebuilt.id])
  }, 180_000)

  it('remove and prune delete exactly the images nothing refers to', async () => {
    const cacheDir = await freshCache()
    const shared = await sharedStore().build('base')
    const store = new ImageStore({ cacheDir })
    // Two custom images from the same tree share an id; an old build nothing names is garbage.
    const one = await store.register('one', shared.rootfs)
    const two = await store.register('two', shared.rootfs)
    expect(two.id).toBe(one.id)
    expect(two.built).toBe(false)
    const orphan = path.join(cacheDir, 'f'.repeat(64))
    await fs.mkdir(path.join(orphan, 'rootfs'), { recursive: true })
    await fs.writeFile(path.join(orphan, 'manifest.json'), '{}')
    const kept = path.join(cacheDir, 'e'.repeat(64))
    await fs.mkdir(path.join(kept, 'rootfs'), { recursive: true })

    expect(await store.prune({ keep: ['e'.repeat(64)] })).toEqual(['f'.repeat(64)])
    expect((await cacheEntries(cacheDir)).images.sort()).toEqual([one.id, 'e'.repeat(64)].sort())

    expect(await store.remove('one')).toBe(true)
    expect((await cacheEntries(cacheDir)).images).toContain(one.id) // still named "two"
    expect(await store.remove('two')).toBe(true)
    expect((await cacheEntries(cacheDir)).images).not.toContain(one.id)
    expect(await store.list()).toEqual([])
    expect(await store.remove('base')).toBe(false) // a preset never built here
    await expect(store.remove('nothing')).rejects.toMatchObject({ code: 'S101' })
    expect((await cacheEntries(cacheDir)).trash).toEqual([])
  }, 120_000)
})
