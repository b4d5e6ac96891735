/** The image modules' parts that need no Debian archive. */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs/promises'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { parseDebFileName, parseFetchedReleases } from '../../lib/images/archive.js'
import { summarizeTree } from '../../lib/images/digest.js'
import { acquireLock } from '../../lib/images/lock.js'
import { applyTrims } from '../../lib/images/poststeps.js'
import { MmdebstrapProgress, ProgressReporter } from '../../lib/images/progress.js'
import { canonicalJson, imageId, presetRecipe } from '../../lib/images/recipe.js'
import { looksLikeRootfs, resolveInRoot } from '../../lib/images/rootfs.js'
import type { ProgressEvent } from '../../lib/images/index.js'
import { isMonotonic, tempDir } from './helpers.js'

let work: string
beforeAll(async () => {
  work = await tempDir('images-units')
})
afterAll(async () => {
  await fs.rm(work, { recursive: true, force: true })
})

describe('progress', () => {
  it('never goes back, skips earlier stages and ends at finalize 100', () => {
    const events: ProgressEvent[] = []
    const reporter = new ProgressReporter((e) => events.push(e))
    reporter.report('download', 0.5)
    reporter.report('resolve', 0.9) // late event of an earlier stage
    reporter.report('download', 0.2) // lower fraction
    reporter.report('extract', 0)
    reporter.report('extract', 0)
    reporter.done()
    expect(isMonotonic(events)).toBe(true)
    expect(events.map((e) => e.stage)).toEqual(['download', 'extract', 'finalize'])
    expect(events.at(-1)).toEqual({ stage: 'finalize', percent: 100 })
  })

  it('follows mmdebstrap -v output through resolve, download and extract', () => {
    const events: ProgressEvent[] = []
    const follower = new MmdebstrapProgress(new ProgressReporter((e) => events.push(e)))
    const transcript = [
      'I: running apt-get update...',
      'Get:1 http://mirror.example/debian bookworm InRelease [151 kB]',
      'Get:2 http://mirror.example/debian bookworm/main amd64 Packages [8790 kB]',
      'I: downloading packages with apt...',
      '0 upgraded, 4 newly installed, 0 to remove and 0 not upgraded.',
      'Get:1 http://mirror.example/debian bookworm/main amd64 libc6 amd64 2.36-9 [2759 kB]',
      'Get:2 http://mirror.example/debian bookworm/main amd64 zlib1g amd64 1:1.2.13 [86 kB]',
      'Get:3 http://mirror.example/debian bookworm/main amd64 python3 amd64 3.11.2-1 [26 kB]',
      'Get:4 http://mirror.example/debian bookworm/main amd64 busybox-static amd64 1:1.35.0-4 [928 kB]',
      'Fetched 3799 kB in 0s (264 MB/s)',
      'I: extracting archives...',
      'I: success in 3.4 seconds',
    ]
    for (const line of transcript) follower.line(line)
    expect(isMonotonic(events)).toBe(true)
    expect([...new Set(events.map((e) => e.stage))]).toEqual(['resolve', 'download', 'extract'])
    const downloads = events.filter((e) => e.stage === 'download').map((e) => e.percent)
    expect(downloads.length).toBeGreaterThanOrEqual(4)
    expect(downloads.at(-1)).toBe(55)
  })
})

describe('recipes and ids', () => {
  it('serializes canonically', () => {
    expect(canonicalJson({ b: 1, a: [{ d: 2, c: 3 }], u: undefined })).toBe('{"a":[{"c":3,"d":2}],"b":1}')
  })

  it('derive ids from recipe and archive state', () => {
    const python = presetRecipe('python', 'bookworm')
    expect(imageId(python, 'a')).toBe(imageId(presetRecipe('python', 'bookworm'), 'a'))
    expect(imageId(python, 'a')).not.toBe(imageId(python, 'b'))
    expect(imageId(python, 'a')).not.toBe(imageId(presetRecipe('python', 'trixie'), 'a'))
    expect(imageId(python, 'a')).not.toBe(imageId({ ...python, packages: [...python.packages, 'curl'] }, 'a'))
    expect(imageId(python, 'a')).toMatch(/^[0-9a-f]{64}$/)
    expect(() => presetRecipe('alpine', 'bookworm')).toThrow(expect.objectContaining({ code: 'S101' }))
  })

  it('reads package versions from .deb names, with epochs', () => {
    expect(parseDebFileName('zlib1g_1%3a1.2.13.dfsg-1_amd64.deb')).toEqual({
      name: 'zlib1g',
      version: '1:1.2.13.dfsg-1',
      arch: 'amd64',
    })
    expect(parseDebFileName('partial')).toBeNull()
    expect(parseDebFileName('lock')).toBeNull()
  })

  it('parses what the extract hook recorded', () => {
    const text = `${'a'.repeat(64)}  x_dists_bookworm_InRelease\nx_dists_bookworm_InRelease:Date: Sat, 11 Jul 2026\n`
    expect(parseFetchedReleases(text)).toEqual([
      { file: 'x_dists_bookworm_InRelease', sha256: 'a'.repeat(64), date: 'Sat, 11 Jul 2026' },
    ])
  })
})

describe('tree digest', () => {
  it('depends on content, modes, links and names, not on times', async () => {
    const tree = path.join(work, 'tree')
    await fs.mkdir(path.join(tree, 'etc'), { recursive: true })
    await fs.writeFile(path.join(tree, 'etc/a'), 'one')
    await fs.symlink('etc/a', path.join(tree, 'link'))
    const first = await summarizeTree(tree)
    expect(first).toMatchObject({ sizeBytes: 3, fileCount: 1 })
    await fs.utimes(path.join(tree, 'etc/a'), new Date(0), new Date(0))
    expect((await summarizeTree(tree)).digest).toBe(first.digest)
    await fs.chmod(path.join(tree, 'etc/a'), 0o600)
    const chmodded = await summarizeTree(tree)
    expect(chmodded.digest).not.toBe(first.digest)
    await fs.writeFile(path.join(tree, 'etc/a'), 'two')
    expect((await summarizeTree(tree)).digest).not.toBe(chmodded.digest)
    await fs.rm(path.join(tree, 'link'))
    await fs.symlink('etc/b', path.join(tree, 'link'))
    expect((await summarizeTree(tree)).digest).not.toBe(chmodded.digest)
  })
})

describe('root filesystem paths', () => {
  it('resolves symlinks inside the image, never on the host', async () => {
    const root = path.join(work, 'root')
    await fs.mkdir(path.join(root, 'usr/bin'), { recursive: true })
    await fs.mkdir(path.join(root, 'etc'), { recursive: true })
    await fs.symlink('usr/bin', path.join(root, 'bin'))
    await fs.symlink('/etc', path.join(root, 'usr/bin/hostetc'))
    await fs.symlink('../../../../../../etc', path.join(root, 'usr/bin/upetc'))
    expect(await resolveInRoot(root, '/bin/sh')).toBe(path.join(root, 'usr/bin/sh'))
    expect(await resolveInRoot(root, '/bin/hostetc/passwd')).toBe(path.join(root, 'etc/passwd'))
    expect(await resolveInRoot(root, '/bin/upetc/passwd')).toBe(path.join(root, 'etc/passwd'))
    expect(await resolveInRoot(root, '/bin/hostetc', false)).toBe(path.join(root, 'usr/bin/hostetc'))
    expect(await looksLikeRootfs(root)).toBe(true)
    expect(await looksLikeRootfs(path.join(root, 'usr'))).toBe(false)
  })

  it('trims by pattern and keeps what is excepted', async () => {
    const root = path.join(work, 'trim')
    await fs.mkdir(path.join(root, 'usr/share/doc/pkg'), { recursive: true })
    await fs.mkdir(path.join(root, 'usr/share/man/man1'), { recursive: true })
    await fs.mkdir(path.join(root, 'usr/share/locale/de'), { recursive: true })
    await fs.writeFile(path.join(root, 'usr/share/doc/pkg/copyright'), 'c')
    await fs.writeFile(path.join(root, 'usr/share/doc/pkg/changelog.gz'), 'c')
    await fs.writeFile(path.join(root, 'usr/share/locale/locale.alias'), 'a')
    await applyTrims(root, ['usr/share/doc/*/*!copyright', 'usr/share/man', 'usr/share/locale/*!locale.alias'])
    expect(await fs.readdir(path.join(root, 'usr/share/doc/pkg'))).toEqual(['copyright'])
    expect(await fs.readdir(path.join(root, 'usr/share/locale'))).toEqual(['locale.alias'])
    expect(await fs.readdir(path.join(root, 'usr/share'))).toEqual(['doc', 'locale'])
  })
})

describe('build lock', () => {
  it('is exclusive: a second taker waits for the release', async () => {
    const lockPath = path.join(work, 'locks', 'one')
    const held = await acquireLock(lockPath)
    let second = false
    const waiting = acquireLock(lockPath, { pollMs: 20 }).then((lock) => {
      second = true
      return lock
    })
    await new Promise((r) => setTimeout(r, 200))
    expect(second).toBe(false)
    await held.release()
    const next = await waiting
    expect(second).toBe(true)
    await next.release()
    expect(await fs.readdir(path.join(work, 'locks'))).toEqual([])
  })

  it('is taken over when its owner process is dead', async () => {
    const lockPath = path.join(work, 'locks', 'stale')
    const dead = spawnSync('sh', ['-c', 'echo $$'], { encoding: 'utf8' })
    const deadPid = Number(dead.stdout.trim())
    await fs.mkdir(lockPath, { recursive: true })
    await fs.writeFile(
      path.join(lockPath, 'owner.json'),
      JSON.stringify({ pid: deadPid, start: '1', acquiredAt: 'then' }),
    )
    const started = Date.now()
    const lock = await acquireLock(lockPath, { timeoutMs: 5000 })
    expect(Date.now() - started).toBeLessThan(2000)
    const owner = JSON.parse(await fs.readFile(path.join(lockPath, 'owner.json'), 'utf8'))
    expect(owner.pid).toBe(process.pid)
    await lock.release()
  })

  it('gives up with S102 after its timeout while a live owner holds it', async () => {
    const lockPath = path.join(work, 'locks', 'busy')
    await fs.mkdir(lockPath, { recursive: true })
    // Owned by our parent (alive for the whole test) under its real start time.
    const ppidStat = await fs.readFile(`/proc/${process.ppid}/stat`, 'utf8')
    const start = ppidStat.slice(ppidStat.lastIndexOf(')') + 2).split(' ')[19]
    await fs.writeFile(
      path.join(lockPath, 'owner.json'),
      JSON.stringify({ pid: process.ppid, start, acquiredAt: 'now' }),
    )
    await expect(acquireLock(lockPath, { timeoutMs: 300, pollMs: 50 })).rejects.toMatchObject({
      code: 'S102',
      retryable: true,
    })
  })
})
