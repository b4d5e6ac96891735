/**
 * `krunbox images list|build|rm|prune` on a private image cache (XDG_CACHE_HOME), so removing
 * images cannot disturb other test files. Builds the base preset cold (a few seconds).
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ensureCliBuilt, krunbox, privateCliEnv, stopAll } from './helpers.js'

const cacheHome = privateCliEnv().home
const { home, env } = privateCliEnv({ XDG_CACHE_HOME: cacheHome })
const imagesDir = path.join(cacheHome, 'krunbox', 'images')
const ID = /^[0-9a-f]{64}$/

beforeAll(ensureCliBuilt, 120_000)
afterAll(async () => {
  await stopAll(env)
  fs.rmSync(home, { recursive: true, force: true })
  fs.rmSync(cacheHome, { recursive: true, force: true })
})

/** Another build of the same tree under another id (as an archive update would produce). */
function copyImage(fromId: string, toId: string): void {
  fs.cpSync(path.join(imagesDir, fromId), path.join(imagesDir, toId), { recursive: true })
  const manifestFile = path.join(imagesDir, toId, 'manifest.json')
  fs.writeFileSync(manifestFile, JSON.stringify({ ...JSON.parse(fs.readFileSync(manifestFile, 'utf8')), id: toId }))
}

function listRows(stdout: string): string[][] {
  return stdout
    .trim()
    .split('\n')
    .slice(1)
    .map((l) => l.split('\t'))
}

describe('krunbox images', () => {
  let baseId = ''

  it('list of an empty cache is the header only', async () => {
    const r = await krunbox(['images'], { env })
    expect(r.code).toBe(0)
    expect(r.stdout).toBe('NAME\tID\tSIZE\tBUILT\n')
  })

  it('build prints the image id on stdout and plain progress lines on stderr', async () => {
    const r = await krunbox(['images', 'build', 'base'], { env, timeoutMs: 170_000 })
    expect(r.stderr).not.toMatch(/krunbox: S/)
    expect(r.code).toBe(0)
    baseId = r.stdout.trim()
    expect(baseId).toMatch(ID)
    const lines = r.stderr.trim().split('\n')
    expect(lines.length).toBeGreaterThan(3)
    for (const line of lines) expect(line).toMatch(/^(resolve|download|extract|trim|compile|finalize) \d{1,3}%$/)
    expect(lines.at(-1)).toBe('finalize 100%')
    expect(fs.existsSync(path.join(imagesDir, baseId, 'manifest.json'))).toBe(true)
  }, 180_000)

  it('building again is a no-op with the same id', async () => {
    const r = await krunbox(['images', 'build', 'base'], { env })
    expect(r.stdout.trim()).toBe(baseId)
    expect(r.stderr).toBe('finalize 100%\n')
    expect(r.ms).toBeLessThan(5000)
  })

  it('build --force rebuilds in place: the whole build again, the same id, a newer build time', async () => {
    const manifestOf = () => JSON.parse(fs.readFileSync(path.join(imagesDir, baseId, 'manifest.json'), 'utf8'))
    const before = manifestOf().builtAt
    const r = await krunbox(['images', 'build', '--force', 'base'], { env, timeoutMs: 170_000 })
    expect(r.code).toBe(0)
    expect(r.stdout.trim()).toBe(baseId)
    expect(r.stderr).toMatch(/^resolve \d+%\n/)
    expect(r.stderr).toMatch(/^extract \d+%$/m)
    expect(manifestOf().builtAt > before).toBe(true)
  }, 180_000)

  it('list shows the image with its size', async () => {
    const rows = listRows((await krunbox(['images', 'list'], { env })).stdout)
    expect(rows).toHaveLength(1)
    const [name, shortId, size] = rows[0]
    expect([name, shortId]).toEqual(['base', baseId.slice(0, 12)])
    const manifest = JSON.parse(fs.readFileSync(path.join(imagesDir, baseId, 'manifest.json'), 'utf8'))
    expect(size).toBe(`${(manifest.sizeBytes / 1048576).toFixed(1)}MiB`)
  })

  it('prune removes images no name points to, but not the image of a live sandbox', async () => {
    const created = await krunbox(['create', 'base'], { env })
    expect(created.code).toBe(0)
    // The name now points to another build (as after an archive update): the sandbox's image is unnamed.
    const newerId = 'f'.repeat(64)
    copyImage(baseId, newerId)
    const nameFile = path.join(imagesDir, 'names', 'base.json')
    fs.writeFileSync(nameFile, JSON.stringify({ ...JSON.parse(fs.readFileSync(nameFile, 'utf8')), id: newerId }))
    const orphan = 'e'.repeat(64)
    copyImage(baseId, orphan)

    const kept = await krunbox(['images', 'prune'], { env })
    expect(kept.code).toBe(0)
    expect(kept.stdout).toBe(`${orphan}\n`)
    expect(fs.existsSync(path.join(imagesDir, baseId))).toBe(true)

    expect((await krunbox(['stop', created.stdout.trim()], { env })).code).toBe(0)
    const pruned = await krunbox(['images', 'prune'], { env })
    expect(pruned.stdout).toBe(`${baseId}\n`)
    expect(fs.existsSync(path.join(imagesDir, baseId))).toBe(false)
    expect(listRows((await krunbox(['images', 'list'], { env })).stdout).map((r) => r[1])).toEqual([
      newerId.slice(0, 12),
    ])
    baseId = newerId
  })

  it('rm forgets the name and deletes the image; rm of an unbuilt preset says so', async () => {
    const r = await krunbox(['images', 'rm', 'base'], { env })
    expect(r.code).toBe(0)
    expect(fs.existsSync(path.join(imagesDir, baseId))).toBe(false)
    expect((await krunbox(['images', 'list'], { env })).stdout).toBe('NAME\tID\tSIZE\tBUILT\n')
    const again = await krunbox(['images', 'rm', 'base'], { env })
    expect(again.code).toBe(0)
    expect(again.stderr).toMatch(/not built; nothing to remove/)
  })

  it('errors: unknown image names and subcommands', async () => {
    for (const [args, message] of [
      [['images', 'rm', 'nosuch'], /^krunbox: S101: image "nosuch" is unknown/],
      [['images', 'build', 'nosuch'], /^krunbox: S101: image "nosuch" is unknown/],
      [['images', 'frob'], /^krunbox: S001: images subcommand "frob" is unknown/],
    ] as const) {
      const r = await krunbox([...args], { env })
      expect(r.stderr).toMatch(message)
      expect(r.code).toBe(125)
    }
  })

  it('build without a name refreshes the cached presets; with none cached it says how they are built', async () => {
    // The rm test above left no preset in this cache.
    const r = await krunbox(['images', 'build'], { env })
    expect(r.code).toBe(0)
    expect(r.stderr).toMatch(
      /^krunbox: no preset is built yet; presets are built on first use or by images build <name>/,
    )
    expect(r.stdout).toBe('')
  })
})
