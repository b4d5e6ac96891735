import { spawnSync } from 'node:child_process'
import fs from 'node:fs/promises'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ImageStore } from '../../lib/images/index.js'
import type { BuildResult } from '../../lib/images/index.js'
import { checkoutUnreachable } from '../helpers/rootless.js'
import { cacheEntries, repoRoot, runInImage, sharedStore, tempDir } from './helpers.js'

describe('custom images', () => {
  let work: string
  let cacheDir: string
  let store: ImageStore
  let base: BuildResult
  let rootDir: string

  const tar = (args: string[]) => {
    const r = spawnSync('tar', args, { encoding: 'utf8' })
    if (r.status !== 0) throw new Error(`tar ${args.join(' ')}: ${r.stderr}`)
  }

  beforeAll(async () => {
    base = await sharedStore().build('base')
    work = await tempDir('images-custom')
    cacheDir = path.join(work, 'cache')
    store = new ImageStore({ cacheDir })
    // A root filesystem of our own: a copy of the base image plus a marker file.
    rootDir = path.join(work, 'rootdir')
    const cp = spawnSync('cp', ['-a', base.rootfs, rootDir])
    expect(cp.status).toBe(0)
    await fs.writeFile(path.join(rootDir, 'etc/marker'), 'custom\n')
    tar(['-C', rootDir, '-cf', path.join(work, 'root.tar'), '.'])
    tar(['-C', rootDir, '-czf', path.join(work, 'root.tar.gz'), '.'])
    tar(['-C', rootDir, '--zstd', '-cf', path.join(work, 'root.tar.zst'), '.'])
  }, 180_000)

  afterAll(async () => {
    if (work) await fs.rm(work, { recursive: true, force: true })
  })

  describe('from a directory and from tarballs', () => {
    it('registers a directory as a content-addressed copy', async () => {
      const image = await store.register('mydir', rootDir)
      expect(image.built).toBe(true)
      expect(image.manifest.kind).toBe('directory')
      expect(image.rootfs.startsWith(cacheDir)).toBe(true)
      expect(runInImage(image.rootfs, ['/bin/sh', '-c', 'echo ok; cat /etc/marker']).stdout).toBe('ok\ncustom\n')
      // Same content under another name: same image, nothing copied twice.
      const again = await store.register('mydir2', rootDir)
      expect(again.id).toBe(image.id)
      expect(again.built).toBe(false)
      expect((await cacheEntries(cacheDir)).images).toHaveLength(1)
    })

    it('registers .tar, .tar.gz and .tar.zst into the same tree', async () => {
      const dir = await store.resolve('mydir')
      for (const file of ['root.tar', 'root.tar.gz', 'root.tar.zst']) {
        const image = await store.register(`from-${file.replace(/\./g, '-')}`, path.join(work, file))
        expect(image.manifest.kind).toBe('tarball')
        expect(image.manifest.source?.sha256).toMatch(/^[0-9a-f]{64}$/)
        expect(runInImage(image.rootfs, ['/bin/sh', '-c', 'echo ok; cat /etc/marker']).stdout).toBe('ok\ncustom\n')
        expect(image.manifest.treeDigest).toBe(dir.manifest.treeDigest)
      }
      const listed = await store.list()
      expect(listed.map((e) => e.name).sort()).toEqual([
        'from-root-tar',
        'from-root-tar-gz',
        'from-root-tar-zst',
        'mydir',
        'mydir2',
      ])
      expect(listed.every((e) => e.preset === false)).toBe(true)
    })

    it('resolves what the cache holds now: a name another store re-registered or removed is never served from memory', async () => {
      const first = await store.resolve('mydir')
      expect((await store.resolve('mydir')).id).toBe(first.id)
      const other = new ImageStore({ cacheDir }) // as another process would
      const bare = path.join(work, 'resolve-bare')
      await fs.mkdir(path.join(bare, 'etc'), { recursive: true })
      await fs.mkdir(path.join(bare, 'bin'), { recursive: true })
      await fs.writeFile(path.join(bare, 'etc/marker'), 'other\n')
      const replaced = await other.register('mydir2', bare)
      expect((await store.resolve('mydir2')).id).toBe(replaced.id)
      expect(await other.remove('mydir2')).toBe(true)
      await expect(store.resolve('mydir2')).rejects.toMatchObject({ code: 'S101' })
      expect((await store.resolve('mydir')).id).toBe(first.id)
      await store.register('mydir2', rootDir)
    })

    it('is immune to later changes of the source', async () => {
      await fs.writeFile(path.join(rootDir, 'etc/marker'), 'changed\n')
      const image = await store.resolve('mydir')
      expect(runInImage(image.rootfs, ['/bin/cat', '/etc/marker']).stdout).toBe('custom\n')
      expect(await store.verify('mydir')).toBe(true)
      await fs.writeFile(path.join(rootDir, 'etc/marker'), 'custom\n')
    })

    it('adds missing mount points and drops device nodes', async () => {
      const bare = path.join(work, 'bare')
      await fs.mkdir(path.join(bare, 'bin'), { recursive: true })
      await fs.mkdir(path.join(bare, 'etc'), { recursive: true })
      await fs.copyFile(path.join(base.rootfs, 'usr/bin/busybox'), path.join(bare, 'bin/busybox'))
      await fs.chmod(path.join(bare, 'bin/busybox'), 0o755)
      await fs.symlink('busybox', path.join(bare, 'bin/sh'))
      if (process.getuid?.() === 0) {
        expect(spawnSync('mknod', [path.join(bare, 'etc/null-dev'), 'c', '1', '3']).status).toBe(0)
      }
      const image = await store.register('bare', bare)
      for (const dir of ['proc', 'sys', 'dev', 'tmp', 'workspace']) {
        expect((await fs.stat(path.join(image.rootfs, dir))).isDirectory()).toBe(true)
      }
      await expect(fs.lstat(path.join(image.rootfs, 'etc/null-dev'))).rejects.toMatchObject({ code: 'ENOENT' })
      expect(runInImage(image.rootfs, ['/bin/sh', '-c', 'echo ok']).stdout).toBe('ok\n')
    })
  })

  describe('from a recipe', () => {
    it('builds a preset plus Debian packages plus host files', async () => {
      const greeting = path.join(work, 'greeting.txt')
      await fs.writeFile(greeting, 'hello from the host\n')
      const script = path.join(work, 'greet.sh')
      await fs.writeFile(script, '#!/bin/sh\necho "greet $1"\n')
      const recipe = {
        base: 'base',
        packages: ['hello'],
        files: [
          { from: greeting, to: '/opt/greeting.txt', mode: 0o640 },
          { from: script, to: '/bin/greet', mode: 0o755 },
        ],
      }
      const image = await store.register('hello', recipe)
      expect(image.manifest.kind).toBe('recipe')
      expect(image.manifest.packages.map((p) => p.name)).toEqual(
        expect.arrayContaining(['hello', 'libc6', 'busybox-static']),
      )
      const run = runInImage(image.rootfs, ['/bin/sh', '-c', 'hello; cat /opt/greeting.txt; greet me'])
      expect(run.stdout).toBe('Hello, world!\nhello from the host\ngreet me\n')
      expect((await fs.stat(path.join(image.rootfs, 'opt/greeting.txt'))).mode & 0o7777).toBe(0o640)
      // /bin is a link to usr/bin inside the image: the file went through it, not onto the host.
      expect((await fs.stat(path.join(image.rootfs, 'usr/bin/greet'))).mode & 0o7777).toBe(0o755)

      // The recipe is remembered: the same registration is a no-op, a changed file a new image.
      expect((await store.register('hello', recipe)).built).toBe(false)
      await fs.writeFile(greeting, 'changed\n')
      const changed = await store.register('hello', recipe)
      expect(changed.id).not.toBe(image.id)
      expect(runInImage(changed.rootfs, ['/bin/cat', '/opt/greeting.txt']).stdout).toBe('changed\n')
      expect((await store.resolve('hello')).id).toBe(changed.id)
      // The old build is unnamed now: prune collects it.
      expect(await store.prune()).toEqual([image.id])
    }, 180_000)
  })

  describe('validation errors', () => {
    it('S104: the source path does not exist', async () => {
      await expect(store.register('missing', path.join(work, 'no-such-dir'))).rejects.toMatchObject({ code: 'S104' })
      await expect(store.register('missing', { path: path.join(work, 'no-such.tar.gz') })).rejects.toMatchObject({
        code: 'S104',
      })
      await expect(
        store.register('missing', { base: 'base', files: [{ from: path.join(work, 'nope'), to: '/x' }] }),
      ).rejects.toMatchObject({
        code: 'S104',
        message: expect.stringContaining('nope'),
      })
    })

    it('S105: the source is not a root filesystem', async () => {
      const empty = path.join(work, 'empty')
      await fs.mkdir(empty, { recursive: true })
      await expect(store.register('empty', empty)).rejects.toMatchObject({
        code: 'S105',
        message: expect.stringContaining(empty),
      })
      const notes = path.join(work, 'notes.txt')
      await fs.writeFile(notes, 'not an image')
      await expect(store.register('notes', notes)).rejects.toMatchObject({ code: 'S105' })
      const docs = path.join(work, 'docs')
      await fs.mkdir(docs, { recursive: true })
      await fs.writeFile(path.join(docs, 'README'), 'hi')
      tar(['-C', docs, '-czf', path.join(work, 'docs.tar.gz'), '.'])
      await expect(store.register('docs', path.join(work, 'docs.tar.gz'))).rejects.toMatchObject({ code: 'S105' })
    })

    // As root the check runs as nobody, who must be able to reach the checkout's code.
    it.skipIf(process.getuid?.() === 0 && checkoutUnreachable !== null)('S106: the source cannot be read', async () => {
      const garbage = path.join(work, 'garbage.tar.gz')
      await fs.writeFile(garbage, Buffer.from('this is not gzip data at all'))
      await expect(store.register('garbage', garbage)).rejects.toMatchObject({
        code: 'S106',
        message: expect.stringContaining(garbage),
      })

      // An unreadable directory: as root everything is readable, so ask an unprivileged user.
      const locked = path.join(work, 'locked')
      await fs.mkdir(locked, { mode: 0o700 })
      await fs.chmod(locked, 0o000)
      if (process.getuid?.() !== 0) {
        await expect(store.register('locked', locked)).rejects.toMatchObject({ code: 'S106' })
        return
      }
      await fs.chmod(work, 0o755)
      const probe = spawnSync(
        'setpriv',
        [
          '--reuid=65534',
          '--regid=65534',
          '--clear-groups',
          process.execPath,
          '--import',
          'tsx',
          '--input-type=module',
          '-e',
          `import { ImageStore } from '${repoRoot}/lib/images/index.ts';
           const store = new ImageStore({ cacheDir: '${work}/nobody-cache', buildMode: 'unshare' });
           store.register('locked', '${locked}').then(() => console.log('registered'), (e) => console.log(e.code));`,
        ],
        { cwd: repoRoot, encoding: 'utf8', env: { ...process.env, HOME: work } },
      )
      expect(probe.stdout.trim(), probe.stderr).toBe('S106')
    })

    it('S107: the name clashes with a preset', async () => {
      await expect(store.register('python', rootDir)).rejects.toMatchObject({
        code: 'S107',
        message: expect.stringContaining('python'),
      })
      await expect(store.register('base', { base: 'base' })).rejects.toMatchObject({ code: 'S107' })
    })

    it('S101: unknown images and unknown recipe bases', async () => {
      await expect(store.resolve('never-registered')).rejects.toMatchObject({
        code: 'S101',
        message: expect.stringContaining('never-registered'),
      })
      await expect(store.build('never-registered')).rejects.toMatchObject({ code: 'S101' })
      await expect(store.register('x', { base: 'ubuntu' })).rejects.toMatchObject({
        code: 'S101',
        message: expect.stringContaining('ubuntu'),
      })
    })

    it('S001: malformed names, sources and recipes', async () => {
      await expect(store.register('Bad Name', rootDir)).rejects.toMatchObject({
        code: 'S001',
        message: expect.stringContaining('Bad Name'),
      })
      await expect(store.resolve('../escape')).rejects.toMatchObject({ code: 'S001' })
      await expect(store.register('x', 42 as never)).rejects.toMatchObject({ code: 'S001' })
      await expect(store.register('x', { base: 'base', packages: ['Bad_Pkg'] })).rejects.toMatchObject({
        code: 'S001',
        message: expect.stringContaining('Bad_Pkg'),
      })
      await expect(
        store.register('x', { base: 'base', files: [{ from: rootDir, to: 'relative/path' }] }),
      ).rejects.toMatchObject({ code: 'S001' })
      await expect(
        store.register('x', { base: 'base', files: [{ from: rootDir, to: '/a/../../etc' }] }),
      ).rejects.toMatchObject({ code: 'S001' })
      await expect(
        store.register('x', { base: 'base', files: [{ from: rootDir, to: '/x', mode: 0o17777 }] }),
      ).rejects.toMatchObject({ code: 'S001' })
      expect(() => new ImageStore({ buildMode: 'fakeroot' as never })).toThrow(
        expect.objectContaining({ code: 'S001' }),
      )
    })

    it('S102: a recipe whose build fails (unknown Debian package) says why', async () => {
      const failed = store.register('nopkg', { base: 'base', packages: ['krunbox-no-such-package'] })
      await expect(failed).rejects.toMatchObject({
        code: 'S102',
        retryable: true,
        message: expect.stringContaining('krunbox-no-such-package'),
      })
      await expect(failed).rejects.toMatchObject({ message: expect.stringContaining('Unable to locate package') })
    }, 120_000)

    it('failed registrations leave nothing behind', async () => {
      const entries = await cacheEntries(cacheDir)
      expect(entries.tmp).toEqual([])
      expect(entries.trash).toEqual([])
      const names = await fs.readdir(path.join(cacheDir, 'names'))
      expect(names.filter((n) => /^(missing|empty|notes|docs|garbage|locked|x|nopkg)\.json$/.test(n))).toEqual([])
    })
  })
})
