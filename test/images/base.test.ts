import fs from 'node:fs/promises'
import path from 'node:path'
import { beforeAll, describe, expect, it } from 'vitest'
import type { BuildResult, ProgressEvent } from '../../lib/images/index.js'
import { PRESETS } from '../../lib/images/index.js'
import { runInImage, sharedStore } from './helpers.js'

describe('base preset', () => {
  const store = sharedStore()
  let image: BuildResult

  beforeAll(async () => {
    // The shared cache outlives test runs: drop builds of older archive states first.
    await store.prune()
    image = await store.build('base')
  }, 180_000)

  it('runs sh -c "echo ok" under bubblewrap', () => {
    const run = runInImage(image.rootfs, ['/bin/sh', '-c', 'echo ok'])
    expect(run.stderr).toBe('')
    expect(run.stdout).toBe('ok\n')
    expect(run.status).toBe(0)
  })

  it('has the usual utilities as busybox applets, at /bin and /usr/bin alike', () => {
    const tools = 'echo cat sleep yes head grep sed tar ls env id hostname ip awk find xargs wc sort'
    const run = runInImage(image.rootfs, [
      '/bin/sh',
      '-c',
      `for t in ${tools}; do command -v $t >/dev/null || echo "missing $t"; done; /usr/bin/sh -c 'yes | head -n 2'`,
    ])
    expect(run.stdout).toBe('y\ny\n')
    expect(run.status).toBe(0)
  })

  it('has users, groups and the system files a process looks up', async () => {
    const run = runInImage(image.rootfs, [
      '/bin/sh',
      '-c',
      'id -un; cat /etc/hostname; grep -c localhost /etc/hosts; grep ^passwd /etc/nsswitch.conf',
    ])
    expect(run.stdout).toBe('root\nkrunbox\n2\npasswd: files\n')
    const passwd = await fs.readFile(path.join(image.rootfs, 'etc/passwd'), 'utf8')
    expect(passwd).toMatch(/^root:x:0:0:root:\/root:\/bin\/sh$/m)
    expect(passwd).toMatch(/^nobody:x:65534:/m)
    expect(await fs.readFile(path.join(image.rootfs, 'etc/group'), 'utf8')).toMatch(/^root:x:0:$/m)
  })

  it('has the mount points and writable directories with their modes', async () => {
    const mode = async (p: string) => (await fs.stat(path.join(image.rootfs, p))).mode & 0o7777
    expect(await mode('tmp')).toBe(0o1777)
    expect(await mode('workspace')).toBe(0o777)
    expect(await mode('root')).toBe(0o700)
    for (const dir of ['proc', 'sys', 'dev']) expect(await fs.readdir(path.join(image.rootfs, dir))).toEqual([])
    // merged /usr: /bin is the same directory as /usr/bin
    expect(await fs.readlink(path.join(image.rootfs, 'bin'))).toBe('usr/bin')
  })

  it('is trimmed: no manuals, no apt state, no host files', async () => {
    const exists = (p: string) =>
      fs.lstat(path.join(image.rootfs, p)).then(
        () => true,
        () => false,
      )
    expect(await exists('usr/share/man')).toBe(false)
    expect(await exists('var/lib/apt')).toBe(false)
    expect(await exists('etc/apt')).toBe(false)
    expect(await fs.readdir(path.join(image.rootfs, 'usr/share/doc/busybox-static'))).toEqual(['copyright'])
    expect(await fs.readFile(path.join(image.rootfs, 'etc/resolv.conf'), 'utf8')).toBe('')
  })

  it('records packages, size and a verifiable tree digest in its manifest', async () => {
    const manifest = image.manifest
    expect(manifest.id).toBe(image.id)
    expect(manifest.kind).toBe('preset')
    expect(manifest.recipe?.packages).toEqual([...PRESETS.base.packages])
    expect(manifest.packages.map((p) => p.name)).toContain('busybox-static')
    expect(manifest.packages.find((p) => p.name === 'busybox-static')?.version).toMatch(/^1:1\./)
    expect(manifest.sizeBytes).toBeGreaterThan(1_000_000)
    expect(manifest.sizeBytes).toBeLessThan(10_000_000)
    expect(manifest.treeDigest).toMatch(/^sha256:[0-9a-f]{64}$/)
    expect(manifest.archive?.fetched.length).toBeGreaterThan(0)
    const onDisk = JSON.parse(await fs.readFile(path.join(store.cacheDir, image.id, 'manifest.json'), 'utf8'))
    expect(onDisk).toEqual(manifest)
    const name = JSON.parse(await fs.readFile(path.join(store.cacheDir, 'names', 'base.json'), 'utf8'))
    expect(name.id).toBe(image.id)
    expect(await store.verify('base')).toBe(true)
  })

  it('does nothing on a second build', async () => {
    const manifestPath = path.join(store.cacheDir, image.id, 'manifest.json')
    const before = await fs.stat(manifestPath)
    const events: ProgressEvent[] = []
    const started = performance.now()
    const again = await store.build('base', { onProgress: (e) => events.push(e) })
    const elapsed = performance.now() - started
    expect(again.built).toBe(false)
    expect(again.id).toBe(image.id)
    expect(elapsed).toBeLessThan(1000)
    expect((await fs.stat(manifestPath)).mtimeMs).toBe(before.mtimeMs)
    expect(events).toEqual([{ stage: 'finalize', percent: 100 }])
  })

  it('resolves to the built image and lists it as a preset', async () => {
    const resolved = await store.resolve('base')
    expect(resolved.id).toBe(image.id)
    expect(resolved.rootfs).toBe(path.join(store.cacheDir, image.id, 'rootfs'))
    const listed = (await store.list()).find((e) => e.name === 'base')
    expect(listed).toMatchObject({ id: image.id, preset: true, sizeBytes: image.manifest.sizeBytes })
  })
})
