/**
 * prune never deletes an image a live sandbox runs on, once its name moved to another build:
 * neither of this runtime nor of another process on the same cache, a detached sandbox whose
 * creator exited included (lib/images/users.ts). Without that, the sandbox's next `exec sh`
 * finds no sh. A mark whose sandbox is gone holds nothing.
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ImageStore } from '../../lib/images/index.js'
import { testRuntime } from '../helpers/runtime.js'
import { repoRoot, tempDir } from './helpers.js'

let work: string
let cacheDir: string

/** A copy of the base image whose /etc/marker says which build it is. */
function tree(marker: string, baseRootfs: string): string {
  const dir = path.join(work, `tree-${marker}`)
  execFileSync('cp', ['-a', baseRootfs, dir])
  fs.writeFileSync(path.join(dir, 'etc/marker'), marker)
  return dir
}

beforeAll(async () => {
  work = await tempDir('prune-live')
  cacheDir = path.join(work, 'cache')
})

afterAll(() => {
  if (work) fs.rmSync(work, { recursive: true, force: true })
})

describe('prune and the images of live sandboxes', () => {
  let trees: Record<'a' | 'b' | 'c' | 'old' | 'new', string>

  beforeAll(async () => {
    const base = await new ImageStore().resolve('base')
    trees = Object.fromEntries(['a', 'b', 'c', 'old', 'new'].map((m) => [m, tree(m, base.rootfs)])) as typeof trees
  }, 60_000)

  it("keeps the image this runtime's sandbox runs on after its name moved, and deletes it once the sandbox ended", async () => {
    const rt = testRuntime({ cacheDir })
    try {
      const a = await rt.images.register('app', trees.a)
      const sb = await rt.create({ image: 'app' })
      expect(sb.imageVersion).toBe(a.id)
      await rt.images.register('app', trees.b)
      expect(await rt.images.prune()).toEqual([])
      expect((await sb.exec('sh', ['-c', 'cat /etc/marker'])).stdout).toBe('a')
      await sb.stop()
      expect(await rt.images.prune()).toEqual([a.id])
    } finally {
      await rt.close()
    }
  }, 60_000)

  it('prunes running beside creates of the unnamed version never delete it under a sandbox that got it', async () => {
    const rt = testRuntime({ cacheDir })
    try {
      const old = await rt.images.register('racing', trees.old)
      await rt.images.register('racing', trees.new)
      let creating = true
      const pruning = (async () => {
        while (creating) await rt.images.prune()
      })()
      const created = await Promise.allSettled(
        Array.from({ length: 8 }, () => rt.create({ image: `racing@${old.id}` })),
      ).finally(() => (creating = false))
      await pruning
      for (const result of created) {
        if (result.status === 'rejected') {
          // Pruned before its mark: refused, never half there.
          expect(result.reason).toMatchObject({ code: 'S101' })
          continue
        }
        expect((await result.value.exec('sh', ['-c', 'cat /etc/marker'])).stdout).toBe('old')
        await result.value.stop()
      }
      expect(await rt.images.prune()).toEqual(created.some((r) => r.status === 'fulfilled') ? [old.id] : [])
    } finally {
      await rt.close()
    }
  }, 90_000)

  it("keeps the image of another process's detached sandbox whose creator exited; its mark holds nothing once it ended", async () => {
    const stateDir = path.join(work, 'child-state')
    const store = new ImageStore({ cacheDir })
    const b = await store.resolve('app')
    const out = execFileSync(
      process.execPath,
      ['--import', 'tsx', path.join(repoRoot, 'test/images/detached-child.ts'), cacheDir, stateDir, 'app'],
      { cwd: repoRoot, encoding: 'utf8', timeout: 60_000 },
    )
    const child = JSON.parse(out.trim().split('\n').pop()!) as { id: string; accessToken: string; imageVersion: string }
    expect(child.imageVersion).toBe(b.id)
    await store.register('app', trees.c)
    expect(await store.prune()).toEqual([])
    const rt = testRuntime({ cacheDir, stateDir })
    try {
      const sb = await rt.attach(child.id, { accessToken: child.accessToken })
      expect((await sb.exec('sh', ['-c', 'cat /etc/marker'])).stdout).toBe('b')
      await sb.stop()
      // Its creator never released the mark: the sandbox's process is gone, so the mark is stale.
      expect(await store.prune()).toEqual([b.id])
      expect(fs.existsSync(path.join(cacheDir, '.users', b.id))).toBe(false)
    } finally {
      await rt.close()
    }
  }, 90_000)
})
