/**
 * sb.execImageCommand(): one call runs a pulled image's own command (Entrypoint, then the given
 * args or else Cmd) in a real sandbox, in its WorkingDir, as its User, over its Env; also from
 * a handle that attached; S001 when the image says neither.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ImageStore, Runtime } from '../../lib/index.js'
import {
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
let rt: Runtime
let baseLayer: Layer
const PASSWD = 'root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n'
const SCRIPT = 'echo "args:$*|env:$GREETING|cwd:$(pwd)|uid:$(id -u)|home:$HOME"'

beforeAll(async () => {
  registry = await startRegistry()
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-oci-command-'))
  baseLayer = gzipLayer(tarDirectory((await new ImageStore().resolve('base')).rootfs))
  rt = new Runtime({ cacheDir: path.join(work, 'cache') })
}, 120_000)

afterAll(async () => {
  await rt?.close()
  await registry?.stop()
  fs.rmSync(work, { recursive: true, force: true })
})

async function appLayer(): Promise<Layer> {
  return plainLayer(
    await tarLayer([
      { name: 'etc/passwd', content: PASSWD },
      { name: 'home/app/', type: 'directory', uid: 1000, gid: 1000 },
      { name: 'srv/app/', type: 'directory', uid: 1000, gid: 1000 },
    ]),
  )
}

describe("sb.execImageCommand(): the image's own command", () => {
  it('runs Entrypoint + Cmd, or Entrypoint + the given args, with the image WorkingDir, User and Env; from an attached handle too', async () => {
    await pushImage(registry, 'cmd/app', '1', [baseLayer, await appLayer()], {
      env: ['GREETING=from-image', 'PATH=/usr/local/bin:/usr/bin:/bin'],
      workingDir: '/srv/app',
      user: 'app',
      entrypoint: ['/bin/sh', '-c', SCRIPT, 'entry'],
      cmd: ['default', 'cmd'],
    })
    const sb = await rt.create({ image: `${registry.host}/cmd/app:1` })
    try {
      const own = await sb.execImageCommand()
      expect(own).toMatchObject({
        success: true,
        stdout: 'args:default cmd|env:from-image|cwd:/srv/app|uid:1000|home:/home/app\n',
      })
      expect((await sb.execImageCommand(['x', 'y z'])).stdout).toBe(
        'args:x y z|env:from-image|cwd:/srv/app|uid:1000|home:/home/app\n',
      )
      // exec's options apply on top of the image's defaults.
      const overridden = await sb.execImageCommand([], {
        env: { GREETING: 'caller' },
        cwd: '/',
        user: 'root',
        encoding: 'buffer',
      })
      expect(overridden.stdout.toString()).toBe('args:|env:caller|cwd:/|uid:0|home:/root\n')
      const other = await rt.attach(sb.id, { accessToken: sb.accessToken as string })
      expect((await other.execImageCommand(['attached'])).stdout).toBe(
        'args:attached|env:from-image|cwd:/srv/app|uid:1000|home:/home/app\n',
      )
      await expect(sb.execImageCommand('x' as unknown as string[])).rejects.toMatchObject({ code: 'S001' })
    } finally {
      await sb.stop()
    }
  }, 120_000)

  it('runs Cmd alone, args replace Cmd; an image with neither is S001 unless args are given', async () => {
    await pushImage(
      registry,
      'cmd/cmd-only',
      '1',
      [baseLayer, plainLayer(await tarLayer([{ name: 'cmd-only', content: '' }]))],
      { cmd: ['/bin/echo', 'only', 'cmd'] },
    )
    await pushImage(registry, 'cmd/neither', '1', [
      baseLayer,
      plainLayer(await tarLayer([{ name: 'neither', content: '' }])),
    ])
    const [cmdOnly, neither] = await Promise.all([
      rt.create({ image: `${registry.host}/cmd/cmd-only:1` }),
      rt.create({ image: `${registry.host}/cmd/neither:1` }),
    ])
    try {
      expect((await cmdOnly.execImageCommand()).stdout).toBe('only cmd\n')
      expect((await cmdOnly.execImageCommand(['/bin/echo', 'replaced'])).stdout).toBe('replaced\n')
      await expect(neither.execImageCommand()).rejects.toMatchObject({
        code: 'S001',
        message: expect.stringContaining('has no Entrypoint or Cmd'),
      })
      expect((await neither.execImageCommand(['/bin/echo', 'given'])).stdout).toBe('given\n')
    } finally {
      await Promise.all([cmdOnly.stop(), neither.stop()])
    }
  }, 120_000)

  it('64 calls at once on one sandbox: each runs the entrypoint with its own args', async () => {
    await pushImage(
      registry,
      'cmd/echo',
      '1',
      [baseLayer, plainLayer(await tarLayer([{ name: 'echo-image', content: '' }]))],
      { entrypoint: ['/bin/echo', 'n'] },
    )
    const sb = await rt.create({ image: `${registry.host}/cmd/echo:1` })
    try {
      const results = await Promise.all(Array.from({ length: 64 }, (_, i) => sb.execImageCommand([String(i)])))
      expect(results.map((r) => r.stdout)).toEqual(Array.from({ length: 64 }, (_, i) => `n ${i}\n`))
    } finally {
      await sb.stop()
    }
  }, 120_000)
})
