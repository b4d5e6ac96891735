/**
 * Export round trips: a sandbox's image and writes (files of root and of uid 1000, modes, a
 * symlink, hard links, a deleted file, a replaced directory) become an OCI layout, a docker
 * save tar and an image pushed to a local docker-registry with Basic auth, and come back
 * identical (every path, type, mode, owner, size, content and link target) in a sandbox of
 * another Runtime with another cache (imported, pulled) and through skopeo and umoci. The
 * config fields are set over the base image's; a pulled base keeps its own layer blobs, a
 * preset's tree layer and a snapshot's layer are made once.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ImageStore, isSandboxError, type Runtime, type Sandbox } from '../../lib/index.js'
import { testRuntime } from '../helpers/runtime.js'
import { SANDBOX_ID_BASE } from '../../lib/drivers/idmap.js'
import {
  hostListing,
  layerEntries,
  layoutImage,
  run,
  sandboxListing,
  stagingLeft,
  umociUnpack,
} from './oci-export-helpers.js'
import { gzipLayer, pushImage, startRegistry, tarDirectory, tarLayer, type Registry } from './oci-registry.js'

const USER = 'exporter'
const PASSWORD = 'export-secret'
const shift = process.getuid?.() === 0 ? SANDBOX_ID_BASE : 0

let registry: Registry
let work: string
let rt: Runtime
let sb: Sandbox
let expected: string[]
const savedDockerConfig = process.env.DOCKER_CONFIG

/** What the sandbox writes: as root and as uid 1000, with a deletion and a directory replaced. */
const WRITES_AS_ROOT = [
  'mkdir -p /srv/app/conf /opt/tool && mkdir -m 777 /srv/work',
  'printf "root file" > /opt/tool/run && chmod 750 /opt/tool/run',
  'printf "conf" > /srv/app/conf/a.conf && chmod 640 /srv/app/conf/a.conf',
  'ln /opt/tool/run /opt/tool/run-again',
  'ln -s ../../opt/tool/run /srv/app/tool && ln -s /etc/passwd /srv/app/passwd',
  'mkdir /srv/app/empty && chmod 711 /srv/app/empty',
  'rm /etc/hostname',
  'rm -rf /usr/share && mkdir /usr/share && printf new > /usr/share/only-this',
  'chmod 1777 /srv/app',
  `printf x > "/srv/$(printf 'n%.0s' $(seq 1 200))"`,
].join(' && ')
const WRITES_AS_USER = [
  'mkdir /workspace/mine && printf "secret of 1000" > /workspace/mine/private && chmod 600 /workspace/mine/private',
  'printf "shared" > /workspace/mine/shared && chmod 664 /workspace/mine/shared',
  'mkdir -m 700 /workspace/closed',
].join(' && ')

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-oci-export-'))
  registry = await startRegistry({ user: USER, password: PASSWORD })
  fs.mkdirSync(path.join(work, 'docker'))
  fs.writeFileSync(
    path.join(work, 'docker', 'config.json'),
    JSON.stringify({ auths: { [registry.host]: { auth: Buffer.from(`${USER}:${PASSWORD}`).toString('base64') } } }),
  )
  process.env.DOCKER_CONFIG = path.join(work, 'docker')
  rt = testRuntime()
  sb = await rt.create({ image: 'base' })
  const asRoot = await sb.exec('sh', ['-c', WRITES_AS_ROOT], { user: '0' })
  expect(asRoot.stderr).toBe('')
  const asUser = await sb.exec('sh', ['-c', WRITES_AS_USER], { user: '1000' })
  expect(asUser.stderr).toBe('')
  expected = await sandboxListing(sb)
}, 180_000)

afterAll(async () => {
  await rt?.close()
  await registry?.stop()
  if (savedDockerConfig === undefined) delete process.env.DOCKER_CONFIG
  else process.env.DOCKER_CONFIG = savedDockerConfig
  fs.rmSync(work, { recursive: true, force: true })
})

/** A sandbox of another Runtime with its own cache, booted from `image` (imported or pulled there). */
async function listedElsewhere(prepare: (other: Runtime) => Promise<string>): Promise<string[]> {
  const other = testRuntime({ cacheDir: fs.mkdtempSync(path.join(work, 'other-cache-')) })
  try {
    const image = await prepare(other)
    const there = await other.create({ image })
    return await sandboxListing(there)
  } finally {
    await other.close()
  }
}

describe('a sandbox exported', () => {
  it('as an OCI layout: umoci and another runtime (images.import) see the same files, owners and modes', async () => {
    const layout = path.join(work, 'app.oci')
    const result = await sb.commit({
      layout,
      name: '1.0',
      config: {
        env: { GREETING: 'hello', PATH: '/opt/tool:/usr/bin:/bin' },
        workingDir: '/srv/work',
        cmd: ['sh', '-c', 'echo "$GREETING from $(pwd)"'],
        labels: { 'org.example.kind': 'test' },
      },
    })
    expect(result.target).toBe(layout)
    expect(result.layers).toHaveLength(2)
    const { manifest, config } = layoutImage(layout)
    expect(manifest.layers.map((l: { digest: string }) => l.digest)).toEqual(result.layers.map((l) => l.digest))
    expect(config.rootfs.diff_ids).toEqual(result.layers.map((l) => l.diffId))
    expect(config.config).toMatchObject({
      Env: ['PATH=/opt/tool:/usr/bin:/bin', 'GREETING=hello'],
      WorkingDir: '/srv/work',
      Labels: { 'org.example.kind': 'test' },
    })
    expect(fs.readFileSync(path.join(layout, 'index.json'), 'utf8')).toContain(
      '"org.opencontainers.image.ref.name":"1.0"',
    )
    // The deletions are OCI's whiteouts and opaque directory.
    const writes = layerEntries(path.join(layout, 'blobs', 'sha256', result.layers[1].digest.slice(7)))
    expect(writes.some((e) => e.endsWith(' etc/.wh.hostname'))).toBe(true)
    expect(writes.some((e) => e.endsWith(' usr/share/.wh..wh..opq'))).toBe(true)
    expect(writes.find((e) => e.endsWith(' workspace/mine/private'))).toMatch(/^-rw------- 1000\/1000 /)

    const rootfs = umociUnpack(layout, '1.0', path.join(work, 'umoci-layout'))
    expect(hostListing(rootfs, { like: expected })).toEqual(expected)
    expect(await listedElsewhere((other) => other.images.import(layout, { name: 'app' }).then(() => 'app'))).toEqual(
      expected,
    )
    expect(stagingLeft(work)).toEqual([])
  }, 180_000)

  it('as a docker save tar: skopeo (docker-archive) with umoci and another runtime see the same tree', async () => {
    const archive = path.join(work, 'app.tar')
    await sb.commit({ archive, name: 'acme/app:2' })
    const names = run('tar', ['-tf', archive]).split('\n')
    expect(names).toEqual(expect.arrayContaining(['manifest.json', 'index.json', 'oci-layout']))
    const saved = JSON.parse(run('tar', ['-xOf', archive, 'manifest.json']))
    expect(saved[0].RepoTags).toEqual(['acme/app:2'])
    run('skopeo', ['copy', '--quiet', `docker-archive:${archive}`, `oci:${path.join(work, 'from-archive')}:x`])
    const rootfs = umociUnpack(path.join(work, 'from-archive'), 'x', path.join(work, 'umoci-archive'))
    expect(hostListing(rootfs, { like: expected })).toEqual(expected)
    expect(
      await listedElsewhere((other) => other.images.import(archive, { name: 'from-tar' }).then(() => 'from-tar')),
    ).toEqual(expected)
  }, 180_000)

  it('pushed with the Docker config credentials: pulled by another runtime and by skopeo, the same tree', async () => {
    const ref = `${registry.host}/exports/app:3`
    const result = await sb.commit({ push: ref, config: { cmd: ['sh', '-c', 'echo "pushed $(id -u)"'], user: '1000' } })
    expect(result.target).toBe(ref)
    // Anonymous access is refused: the push authenticated.
    expect((await fetch(`${registry.url}/v2/exports/app/manifests/3`)).status).toBe(401)
    const other = testRuntime({ cacheDir: fs.mkdtempSync(path.join(work, 'pull-cache-')) })
    try {
      const pulled = await other.images.pull(ref)
      expect(pulled.manifest.oci?.manifestDigest).toBe(result.manifestDigest)
      expect(hostListing(pulled.rootfs, { shift, like: expected })).toEqual(expected)
      const there = await other.create({ image: ref })
      expect(await sandboxListing(there)).toEqual(expected)
      expect((await there.execImageCommand()).stdout).toBe('pushed 1000\n')
    } finally {
      await other.close()
    }
    run('skopeo', [
      'copy',
      '--quiet',
      '--src-tls-verify=false',
      '--src-creds',
      `${USER}:${PASSWORD}`,
      `docker://${ref}`,
      `oci:${path.join(work, 'from-registry')}:x`,
    ])
    const rootfs = umociUnpack(path.join(work, 'from-registry'), 'x', path.join(work, 'umoci-registry'))
    expect(hostListing(rootfs, { like: expected })).toEqual(expected)
  }, 180_000)

  it("runs the image's command as set: Cmd in WorkingDir over Env", async () => {
    const other = testRuntime({ cacheDir: fs.mkdtempSync(path.join(work, 'cmd-cache-')) })
    try {
      await other.images.import(path.join(work, 'app.oci'), { name: 'app' })
      const there = await other.create({ image: 'app' })
      expect((await there.execImageCommand()).stdout).toBe('hello from /srv/work\n')
    } finally {
      await other.close()
    }
  }, 120_000)

  it("makes a preset's tree layer once: a second export reuses its blob", async () => {
    const first = await sb.commit({ layout: path.join(work, 'again-1') })
    const cache = new ImageStore().cacheDir
    const blob = path.join(cache, 'blobs', 'sha256', first.layers[0].digest.slice(7))
    const before = fs.statSync(blob)
    const second = await sb.commit({ layout: path.join(work, 'again-2') })
    expect(second.layers[0]).toEqual(first.layers[0])
    const after = fs.statSync(blob)
    expect([after.ino, after.mtimeMs]).toEqual([before.ino, before.mtimeMs])
  }, 120_000)
})

describe('a snapshot exported', () => {
  it('is the same image as its sandbox; its layer is made once and removed with the snapshot', async () => {
    const snap = await sb.snapshot()
    const first = await rt.snapshots.export(snap, { layout: path.join(work, 'snap-1') })
    const kept = fs.readdirSync(path.join(rt.snapshots.root, '.exports')).filter((n) => n.startsWith(snap.id))
    expect(kept).toHaveLength(2)
    const stamps = kept.map((n) => fs.statSync(path.join(rt.snapshots.root, '.exports', n)).mtimeMs)
    const second = await rt.snapshots.export(snap.id, { archive: path.join(work, 'snap-2.tar') })
    expect(second.layers).toEqual(first.layers)
    expect(kept.map((n) => fs.statSync(path.join(rt.snapshots.root, '.exports', n)).mtimeMs)).toEqual(stamps)
    const rootfs = umociUnpack(path.join(work, 'snap-1'), 'latest', path.join(work, 'umoci-snap'))
    expect(hostListing(rootfs, { like: expected })).toEqual(expected)
    rt.snapshots.remove(snap)
    expect(fs.readdirSync(path.join(rt.snapshots.root, '.exports')).filter((n) => n.startsWith(snap.id))).toEqual([])
  }, 120_000)
})

describe('an OCI image exported', () => {
  it("keeps the base's layer blobs as they are and its config as the defaults", async () => {
    const base = await new ImageStore().resolve('base')
    const baseLayer = gzipLayer(tarDirectory(base.rootfs))
    const extra = gzipLayer(
      await tarLayer([
        { name: 'srv/', type: 'directory' },
        { name: 'srv/from-base', content: 'b' },
      ]),
    )
    await pushImage(
      registry,
      'bases/app',
      '1',
      [baseLayer, extra],
      {
        env: ['PATH=/usr/bin:/bin', 'FROM_BASE=1'],
        user: '1000',
        labels: { base: 'yes' },
        cmd: ['sh'],
      },
      { authorization: `Basic ${Buffer.from(`${USER}:${PASSWORD}`).toString('base64')}` },
    )
    const ref = `${registry.host}/bases/app:1`
    const own = testRuntime({ cacheDir: fs.mkdtempSync(path.join(work, 'oci-cache-')) })
    const pulled = await own.images.pull(ref)
    const from = await own.create({ image: ref })
    try {
      await from.exec('sh', ['-c', 'printf more > /srv/added'], { user: '0' })
      const layout = path.join(work, 'from-oci')
      const result = await from.commit({ layout, config: { env: { ADDED: '2' }, labels: { added: 'yes' } } })
      expect(result.layers.slice(0, 2).map((l) => l.digest)).toEqual(pulled.manifest.oci?.layers.map((l) => l.digest))
      for (const l of result.layers.slice(0, 2))
        expect(fs.readFileSync(path.join(layout, 'blobs', 'sha256', l.digest.slice(7)))).toEqual(
          [baseLayer.blob, extra.blob].find((b) => b.length === l.size),
        )
      const { config } = layoutImage(layout)
      expect(config.config).toMatchObject({
        Env: ['PATH=/usr/bin:/bin', 'FROM_BASE=1', 'ADDED=2'],
        User: '1000',
        Cmd: ['sh'],
        Labels: { base: 'yes', added: 'yes' },
      })
      const rootfs = umociUnpack(layout, 'latest', path.join(work, 'umoci-oci'))
      expect(fs.readFileSync(path.join(rootfs, 'srv', 'added'), 'utf8')).toBe('more')
      expect(fs.readFileSync(path.join(rootfs, 'srv', 'from-base'), 'utf8')).toBe('b')
    } finally {
      await own.close()
    }
  }, 180_000)
})

describe('bad input', () => {
  it('refuses an options object without exactly one target, or with bad values, naming them (S001)', async () => {
    const cases: Array<[unknown, RegExp]> = [
      [undefined, /must name a target/],
      [{}, /exactly one target .* got none/],
      [{ layout: '/x', archive: '/y' }, /got layout and archive/],
      [{ layout: '/x', bogus: 1 }, /unknown option "bogus"/],
      [{ layout: '/x', name: 'not a name!' }, /name "not a name!" must be/],
      [{ archive: '/x', name: 'NoTag' }, /name "NoTag" must be repository:tag/],
      [{ push: 'localhost:1/a' }, /neither a :tag/],
      [{ push: `localhost:1/a@sha256:${'a'.repeat(64)}` }, /must name a tag and no digest/],
      [{ layout: '/x', config: { cmd: [] } }, /config.cmd must not be empty/],
      [{ layout: '/x', config: { workingDir: 'rel' } }, /config.workingDir must be an absolute path, got "rel"/],
      [{ layout: '/x', config: { env: { 'A=B': '1' } } }, /config.env key "A=B"/],
      [{ layout: '/x', timeoutMs: 5 }, /timeoutMs is for a push/],
    ]
    for (const [options, message] of cases) {
      const err = await sb.commit(options as never).then(
        () => null,
        (e: unknown) => e,
      )
      expect(isSandboxError(err, 'S001'), String(err)).toBe(true)
      expect((err as Error).message).toMatch(message)
    }
  })

  it('refuses a target that exists (S213), a missing directory (S211) and one the host refuses (S215), leaving nothing', async () => {
    fs.writeFileSync(path.join(work, 'taken'), 'mine')
    fs.mkdirSync(path.join(work, 'taken-dir'))
    for (const target of ['taken', 'taken-dir']) {
      for (const key of ['layout', 'archive'] as const) {
        const err = await sb.commit({ [key]: path.join(work, target) }).catch((e: unknown) => e)
        expect(isSandboxError(err, 'S213'), String(err)).toBe(true)
        expect((err as Error).message).toContain(path.join(work, target))
      }
    }
    expect(fs.readFileSync(path.join(work, 'taken'), 'utf8')).toBe('mine')
    expect(fs.readdirSync(path.join(work, 'taken-dir'))).toEqual([])
    const missing = await sb.commit({ layout: path.join(work, 'no', 'such', 'dir') }).catch((e: unknown) => e)
    expect(isSandboxError(missing, 'S211'), String(missing)).toBe(true)
    // sysfs refuses every new entry, also to root.
    for (const key of ['layout', 'archive'] as const) {
      const refused = await sb.commit({ [key]: '/sys/krunbox-export' }).catch((e: unknown) => e)
      expect(isSandboxError(refused, 'S215'), String(refused)).toBe(true)
    }
    expect(stagingLeft(work)).toEqual([])
    expect(fs.readdirSync(rt.snapshots.root).filter((n) => n.startsWith('.tmp'))).toEqual([])
  })

  it('refuses a registry that refuses: wrong credentials, 403 and 500 (S102, retryable only for 500)', async () => {
    fs.writeFileSync(
      path.join(work, 'docker', 'config.json'),
      JSON.stringify({ auths: { [registry.host]: { auth: Buffer.from(`${USER}:wrong`).toString('base64') } } }),
    )
    try {
      const denied = await sb.commit({ push: `${registry.host}/exports/denied:1` }).catch((e: unknown) => e)
      expect(isSandboxError(denied, 'S102'), String(denied)).toBe(true)
      expect((denied as { retryable: boolean }).retryable).toBe(false)
      expect((denied as Error).message).toMatch(/access denied/)
    } finally {
      fs.writeFileSync(
        path.join(work, 'docker', 'config.json'),
        JSON.stringify({ auths: { [registry.host]: { auth: Buffer.from(`${USER}:${PASSWORD}`).toString('base64') } } }),
      )
    }
    const { createServer } = await import('node:http')
    for (const status of [403, 500]) {
      const server = createServer((req, res) => {
        req.resume()
        res.writeHead(status).end()
      })
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
      const port = (server.address() as { port: number }).port
      try {
        const err = await sb.commit({ push: `127.0.0.1:${port}/refuses/app:1` }).catch((e: unknown) => e)
        expect(isSandboxError(err, 'S102'), String(err)).toBe(true)
        expect((err as Error).message).toContain(`HTTP ${status}`)
        expect((err as { retryable: boolean }).retryable).toBe(status === 500)
      } finally {
        server.closeAllConnections()
        await new Promise((resolve) => server.close(resolve))
      }
    }
  })

  it('refuses a sandbox that ended (S004) and a snapshot whose image left the cache (S101)', async () => {
    const other = testRuntime({ cacheDir: fs.mkdtempSync(path.join(work, 'gone-cache-')) })
    try {
      await other.images.import(path.join(work, 'app.oci'), { name: 'app' })
      const short = await other.create({ image: 'app' })
      await short.exec('sh', ['-c', 'echo x > /srv/x'], { user: '0' })
      const snap = await short.snapshot()
      await short.stop()
      const ended = await short.commit({ layout: path.join(work, 'ended') }).catch((e: unknown) => e)
      expect(isSandboxError(ended, 'S004'), String(ended)).toBe(true)
      await other.images.remove('app')
      const gone = await other.snapshots.export(snap, { layout: path.join(work, 'gone') }).catch((e: unknown) => e)
      expect(isSandboxError(gone, 'S101'), String(gone)).toBe(true)
      expect((gone as Error).message).toContain(snap.imageVersion)
      expect(fs.existsSync(path.join(work, 'ended')) || fs.existsSync(path.join(work, 'gone'))).toBe(false)
    } finally {
      await other.close()
    }
  }, 120_000)
})
