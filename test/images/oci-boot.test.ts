/**
 * Real sandboxes from pulled OCI images: the image config's Env, WorkingDir and User are every
 * command's defaults; a distroless image (no /bin/sh) boots; 16 concurrent creates and two
 * other processes pulling one uncached image download each blob once; autoInstall: false,
 * the allowlist and customImages treat references as the seed API does.
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ImageStore, Runtime } from '../../lib/index.js'
import { resolveInRoot } from '../../lib/images/rootfs.js'
import { ensureCliBuilt, krunbox, privateCliEnv } from '../cli/helpers.js'
import {
  blobGets,
  gzipLayer,
  plainLayer,
  pushImage,
  startRegistry,
  tarDirectory,
  tarLayer,
  type Layer,
  type Registry,
} from './oci-registry.js'

let registry: Registry
let work: string
let baseLayer: Layer
let busybox: Buffer
const PASSWD = 'root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n'
const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')

beforeAll(async () => {
  registry = await startRegistry()
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-oci-boot-'))
  const base = await new ImageStore().resolve('base')
  baseLayer = gzipLayer(tarDirectory(base.rootfs))
  busybox = fs.readFileSync(await resolveInRoot(base.rootfs, '/bin/busybox'))
}, 120_000)

afterAll(async () => {
  await registry?.stop()
  fs.rmSync(work, { recursive: true, force: true })
})

describe('sandboxes from OCI images', () => {
  it("boots a pulled image; exec sees its Env, WorkingDir and User (with HOME), the caller's env and user on top", async () => {
    const app = plainLayer(
      await tarLayer([
        { name: 'etc/passwd', content: PASSWD },
        { name: 'home/app/', type: 'directory', uid: 1000, gid: 1000 },
        { name: 'srv/app/', type: 'directory', uid: 1000, gid: 1000 },
        { name: 'srv/app/hello', content: 'hi' },
      ]),
    )
    await pushImage(registry, 'boot/app', '1', [baseLayer, app], {
      env: ['GREETING=from-image', 'OTHER=image', 'PATH=/usr/local/bin:/usr/bin:/bin'],
      workingDir: '/srv/app',
      user: 'app',
    })
    const rt = new Runtime({ cacheDir: path.join(work, 'cache-env') })
    try {
      const sb = await rt.create({ image: `${registry.host}/boot/app:1`, env: { OTHER: 'caller' } })
      const r = await sb.exec('sh', ['-c', 'echo "$GREETING $OTHER"; pwd; id -u; echo $HOME; cat hello'])
      expect(r.stdout).toBe('from-image caller\n/srv/app\n1000\n/home/app\nhi')
      expect((await sb.exec('id', ['-u'], { user: 'root' })).stdout).toBe('0\n')
      await sb.stop()
      const asRoot = await rt.create({ image: `${registry.host}/boot/app:1`, user: '0' })
      expect((await asRoot.exec('id', ['-u'])).stdout).toBe('0\n')
      await asRoot.stop()
    } finally {
      await rt.close()
    }
  }, 120_000)

  it('boots a distroless image (no /bin/sh, no /bin)', async () => {
    const layer = gzipLayer(
      await tarLayer([
        { name: 'etc/', type: 'directory' },
        {
          name: 'etc/passwd',
          content: 'root:x:0:0:root:/root:/nologin\nnonroot:x:65532:65532::/home/nonroot:/nologin\n',
        },
        { name: 'app/', type: 'directory' },
        { name: 'app/busybox', content: busybox, mode: 0o755 },
      ]),
    )
    await pushImage(registry, 'boot/distroless', '1', [layer], { user: '65532', entrypoint: ['/app/busybox'] })
    const rt = new Runtime({ cacheDir: path.join(work, 'cache-distroless') })
    try {
      const sb = await rt.create({ image: `${registry.host}/boot/distroless:1` })
      expect((await sb.exec('/app/busybox', ['id', '-u'])).stdout).toBe('65532\n')
      expect((await sb.exec('/app/busybox', ['ls', '/bin'])).exitCode).not.toBe(0)
      await sb.stop()
    } finally {
      await rt.close()
    }
  }, 120_000)

  it('16 concurrent creates and two other processes pulling one uncached image download each blob once', async () => {
    const own = gzipLayer(
      await tarLayer([
        { name: 'etc/passwd', content: PASSWD },
        { name: 'concurrent', content: 'once' },
      ]),
    )
    const pushed = await pushImage(registry, 'boot/concurrent', '1', [baseLayer, own])
    const cacheDir = path.join(work, 'cache-concurrent')
    const ref = `${registry.host}/boot/concurrent:1`
    const before = blobGets(registry).length
    const pullIn = () =>
      new Promise<number>((resolve) => {
        const child = spawn(
          process.execPath,
          [
            '--import',
            'tsx',
            '-e',
            `import('${repoRoot}/lib/images/index.ts').then(({ ImageStore }) => new ImageStore({ cacheDir: ${JSON.stringify(cacheDir)} }).pull(${JSON.stringify(ref)})).then(() => process.exit(0), (e) => { console.error(e); process.exit(1) })`,
          ],
          { cwd: repoRoot, stdio: ['ignore', 'ignore', 'inherit'] },
        )
        child.on('exit', (code) => resolve(code ?? 1))
      })
    const rt = new Runtime({ cacheDir, maxConcurrentSandboxes: 16 })
    try {
      const [sandboxes, codes] = await Promise.all([
        Promise.all(Array.from({ length: 16 }, () => rt.create({ image: ref }))),
        Promise.all([pullIn(), pullIn()]),
      ])
      expect(codes).toEqual([0, 0])
      const outs = await Promise.all(sandboxes.map((sb) => sb.exec('cat', ['/concurrent'])))
      expect(outs.map((o) => o.stdout)).toEqual(Array(16).fill('once'))
      const gets = blobGets(registry).slice(before)
      expect(gets.filter((d) => d === pushed.configDigest).length).toBeLessThanOrEqual(3) // config: each process reads it once
      const layers = gets.filter((d) => d !== pushed.configDigest).sort()
      expect(layers).toEqual([...new Set(layers)])
      expect(layers.length).toBe(2)
      await Promise.all(sandboxes.map((sb) => sb.stop()))
    } finally {
      await rt.close()
    }
  }, 240_000)

  it("krunbox run <image> without a command runs the image's own Entrypoint and Cmd; images pull/ls/rm from the CLI", async () => {
    await ensureCliBuilt()
    const layer = plainLayer(await tarLayer([{ name: 'etc/passwd', content: PASSWD }]))
    await pushImage(registry, 'boot/cli', '1', [baseLayer, layer], {
      env: ['GREETING=from-image'],
      entrypoint: ['/bin/sh', '-c'],
      cmd: ['echo own-command $GREETING'],
    })
    const ref = `${registry.host}/boot/cli:1`
    const { home, env } = privateCliEnv({ XDG_CACHE_HOME: path.join(work, 'cli-cache') })
    try {
      const pulled = await krunbox(['images', 'pull', ref], { env, timeoutMs: 120_000 })
      expect(pulled.code, pulled.stderr).toBe(0)
      expect(pulled.stdout).toMatch(/^[0-9a-f]{64}\n$/)
      expect((await krunbox(['images', 'ls'], { env })).stdout).toContain(ref)
      const own = await krunbox(['run', ref], { env, timeoutMs: 120_000 })
      expect(own.stdout, own.stderr).toBe('own-command from-image\n')
      expect(own.code).toBe(0)
      expect((await krunbox(['images', 'rm', ref], { env })).code).toBe(0)
    } finally {
      fs.rmSync(home, { recursive: true, force: true })
    }
  }, 240_000)

  it('autoInstall: false is S101 for a missing image; the allowlist takes references in any spelling; customImages names a reference', async () => {
    const layer = plainLayer(await tarLayer([{ name: 'etc/passwd', content: PASSWD }]))
    await pushImage(registry, 'boot/policy', '1', [baseLayer, layer])
    const ref = `${registry.host}/boot/policy:1`
    const cacheDir = path.join(work, 'cache-policy')
    const offline = new Runtime({ cacheDir, autoInstall: false })
    try {
      await expect(offline.create({ image: ref })).rejects.toMatchObject({
        code: 'S101',
        message: expect.stringContaining('krunbox images pull'),
      })
    } finally {
      await offline.close()
    }
    expect(() => new Runtime({ imageAllowlist: ['ghcr.io/Bad/ref:1'] })).toThrow(
      expect.objectContaining({ code: 'S103' }),
    )
    expect(() => new Runtime({ customImages: { base: ref } })).toThrow(expect.objectContaining({ code: 'S107' }))
    const rt = new Runtime({ cacheDir, imageAllowlist: [ref, 'mine'], customImages: { mine: ref } })
    try {
      await expect(rt.create({ image: 'python:3.12-slim' })).rejects.toMatchObject({ code: 'S100' })
      await expect(rt.create({ image: 'ghcr.io/x/y:' })).rejects.toMatchObject({
        code: 'S001',
        message: expect.stringContaining('ghcr.io/x/y:'),
      })
      const byName = await rt.create({ image: 'mine' })
      expect(byName.image).toBe('mine')
      await byName.stop()
      const pulled = new Runtime({ cacheDir, autoInstall: false, imageAllowlist: [ref] })
      try {
        const sb = await pulled.create({ image: ref })
        expect((await sb.exec('echo', ['ok'])).stdout).toBe('ok\n')
        await sb.stop()
      } finally {
        await pulled.close()
      }
    } finally {
      await rt.close()
    }
  }, 120_000)
})
