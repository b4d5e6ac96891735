/**
 * OCI pulls from a real registry (Debian's docker-registry) and imports without one:
 * references, platforms, layer sharing, pull policies, zstd/gzip/plain layers, Docker and OCI
 * media types, docker save / OCI layout / oci-archive, rm and prune.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { summarizeTree } from '../../lib/images/digest.js'
import { ImageStore } from '../../lib/images/index.js'
import { looksLikeReference, parseReference } from '../../lib/images/oci/reference.js'
import {
  blobGets,
  gzipLayer,
  imageConfig,
  plainLayer,
  pushBlob,
  pushImage,
  pushIndex,
  pushManifest,
  sha256,
  startRegistry,
  tarLayer,
  type Layer,
  type Registry,
} from './oci-registry.js'

let registry: Registry
let work: string
const hostArch = process.arch === 'x64' ? 'amd64' : 'arm64'
const otherArch = hostArch === 'amd64' ? 'arm64' : 'amd64'

beforeAll(async () => {
  registry = await startRegistry()
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-oci-pull-'))
})

afterAll(async () => {
  await registry?.stop()
  fs.rmSync(work, { recursive: true, force: true })
})

function zstdLayer(raw: Buffer): Layer {
  const out = spawnSync('zstd', ['-q', '-c', '-1'], { input: raw })
  if (out.status !== 0) throw new Error('zstd failed')
  return { blob: out.stdout, diffId: sha256(raw), mediaType: 'application/vnd.oci.image.layer.v1.tar+zstd' }
}

const store = () => new ImageStore({ cacheDir: path.join(work, 'cache') })

describe('references', () => {
  it('parses full, digest and Docker Hub short forms; a bare word is a name', () => {
    expect(parseReference('python:3.12-slim').canonical).toBe('docker.io/library/python:3.12-slim')
    expect(parseReference('acme/app:1').canonical).toBe('docker.io/acme/app:1')
    const d = `sha256:${'a'.repeat(64)}`
    expect(parseReference(`ghcr.io/acme/app@${d}`)).toMatchObject({
      registry: 'ghcr.io',
      repository: 'acme/app',
      tag: null,
      digest: d,
    })
    expect(parseReference('localhost:5000/x/y:z')).toMatchObject({
      registry: 'localhost:5000',
      repository: 'x/y',
      tag: 'z',
    })
    expect(looksLikeReference('python')).toBe(false)
    expect(looksLikeReference('./images/app.tar')).toBe(false)
    expect(looksLikeReference('ghcr.io/acme/app:1.2.3')).toBe(true)
    for (const bad of [
      'ghcr.io/Acme/app:1',
      'app:-x',
      `app@sha256:${'g'.repeat(64)}`,
      'ghcr.io/acme/app',
      'a b:1',
      'x//y:1',
    ]) {
      expect(() => parseReference(bad), bad).toThrow(
        expect.objectContaining({ code: 'S001', message: expect.stringContaining(JSON.stringify(bad)) }),
      )
    }
  })
})

describe('OCI pull', () => {
  let base: Layer
  beforeAll(async () => {
    base = gzipLayer(
      await tarLayer([
        { name: 'etc/', type: 'directory' },
        { name: 'etc/passwd', content: 'root:x:0:0:root:/root:/bin/sh\nweb:x:33:33::/srv:/bin/sh\n' },
        { name: 'shared', content: 'base layer' },
      ]),
    )
  })

  it('pulls, records the config, shares layers between images, and honours pull policies', async () => {
    const own = zstdLayer(
      await tarLayer([
        { name: 'srv/', type: 'directory', uid: 33, gid: 33 },
        { name: 'srv/a', content: 'image a' },
      ]),
    )
    await pushImage(registry, 'share/a', '1', [base, own], {
      env: ['A=1', 'PATH=/bin'],
      workingDir: '/srv/',
      user: 'web',
      cmd: ['serve'],
      entrypoint: ['/bin/sh', '-c'],
      labels: { l: 'v' },
      exposedPorts: ['8080/tcp'],
    })
    const s = store()
    const events: number[] = []
    const a = await s.pull(`${registry.host}/share/a:1`, { onProgress: (e) => e.layer && events.push(e.layer.bytes) })
    expect(fs.readFileSync(path.join(a.rootfs, 'srv/a'), 'utf8')).toBe('image a')
    expect(a.manifest.kind).toBe('oci')
    expect(a.manifest.oci?.config).toEqual({
      env: { A: '1', PATH: '/bin' },
      workingDir: '/srv',
      user: 'web',
      cmd: ['serve'],
      entrypoint: ['/bin/sh', '-c'],
      labels: { l: 'v' },
      exposedPorts: ['8080/tcp'],
    })
    expect(a.manifest.oci?.userSpec).toBe('33:33')
    // The tree digest computed off the event loop is digest.ts's, and owners are the sandbox's range on a root host.
    expect(a.manifest.treeDigest).toBe((await summarizeTree(a.rootfs)).digest)
    const asRoot = process.getuid?.() === 0
    expect(fs.statSync(path.join(a.rootfs, 'srv')).uid).toBe(asRoot ? 1_000_000_033 : process.getuid?.())
    expect(fs.statSync(a.rootfs).uid).toBe(asRoot ? 1_000_000_000 : process.getuid?.())
    expect(events.length).toBeGreaterThanOrEqual(2)

    // Image b shares the base layer: only its own layer and config are downloaded. Its
    // manifest has no mediaType field (as umoci writes them): the Content-Type decides.
    const ownB = plainLayer(await tarLayer([{ name: 'b', content: 'image b' }]))
    const configB = imageConfig([base, ownB])
    const configDigest = await pushBlob(registry, 'share/b', configB)
    await pushBlob(registry, 'share/b', base.blob)
    await pushBlob(registry, 'share/b', ownB.blob)
    const manifestB = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: configDigest, size: configB.length },
        layers: [base, ownB].map((l) => ({ mediaType: l.mediaType, digest: sha256(l.blob), size: l.blob.length })),
      }),
    )
    await pushManifest(registry, 'share/b', '1', manifestB, 'application/vnd.oci.image.manifest.v1+json')
    const before = blobGets(registry).length
    const b = await s.pull(`${registry.host}/share/b:1`)
    expect(blobGets(registry).slice(before).sort()).toEqual([configDigest, sha256(ownB.blob)].sort())
    expect(fs.readFileSync(path.join(b.rootfs, 'shared'), 'utf8')).toBe('base layer')

    // if-missing: no request at all; always: one manifest request, no blob; never: from the cache.
    const count = registry.requests().length
    expect((await s.pull(`${registry.host}/share/a:1`)).id).toBe(a.id)
    expect(registry.requests().length).toBe(count)
    expect((await s.pull(`${registry.host}/share/a:1`, { policy: 'always' })).id).toBe(a.id)
    expect(
      registry
        .requests()
        .slice(count)
        .map((r) => `${r.method} ${r.uri}`),
    ).toEqual([`GET /v2/share/a/manifests/1`])
    expect((await s.pull(`${registry.host}/share/a:1`, { policy: 'never' })).id).toBe(a.id)
    await expect(s.pull(`${registry.host}/share/never:1`, { policy: 'never' })).rejects.toMatchObject({ code: 'S101' })

    // The same image by digest and re-tagged shares the published rootfs.
    const byDigest = await s.pull(`${registry.host}/share/a@${a.manifest.oci?.manifestDigest}`)
    expect(byDigest.id).toBe(a.id)

    // rm forgets a reference and its image; prune drops blobs no image uses (the shared base stays).
    expect((await s.list()).map((e) => e.name).sort()).toEqual(
      [
        `${registry.host}/share/a:1`,
        `${registry.host}/share/a@${a.manifest.oci?.manifestDigest}`,
        `${registry.host}/share/b:1`,
      ].sort(),
    )
    await s.remove(`${registry.host}/share/a:1`)
    await s.remove(`${registry.host}/share/a@${a.manifest.oci?.manifestDigest}`)
    expect(fs.existsSync(a.rootfs)).toBe(false)
    await s.prune()
    const blobs = fs.readdirSync(path.join(work, 'cache', 'blobs', 'sha256')).map((h) => `sha256:${h}`)
    expect(blobs).toContain(sha256(base.blob))
    expect(blobs).not.toContain(sha256(own.blob))
  })

  it('two images with the same layers share one rootfs but each keeps its own config, through re-pulls and prune', async () => {
    const layer = plainLayer(
      await tarLayer([
        { name: 'etc/', type: 'directory' },
        { name: 'etc/passwd', content: 'root:x:0:0:root:/root:/bin/sh\nweb:x:33:33::/srv:/bin/sh\n' },
        { name: 'app', content: 'same' },
      ]),
    )
    // A Dockerfile that changed only CMD, ENV and USER adds no layer.
    await pushImage(registry, 'samelayers/one', '1', [base, layer], { env: ['WHO=one'], cmd: ['one'], user: 'root' })
    await pushImage(registry, 'samelayers/two', '1', [base, layer], { env: ['WHO=two'], cmd: ['two'], user: 'web' })
    const s = store()
    const one = await s.pull(`${registry.host}/samelayers/one:1`)
    const two = await s.pull(`${registry.host}/samelayers/two:1`)
    expect(two.id).toBe(one.id)
    const configOf = (r: typeof one) => ({
      env: r.manifest.oci?.config.env,
      cmd: r.manifest.oci?.config.cmd,
      userSpec: r.manifest.oci?.userSpec,
    })
    expect(configOf(one)).toEqual({ env: { WHO: 'one' }, cmd: ['one'], userSpec: '0:0' })
    expect(configOf(two)).toEqual({ env: { WHO: 'two' }, cmd: ['two'], userSpec: '33:33' })
    expect(two.manifest.oci?.configDigest).not.toBe(one.manifest.oci?.configDigest)
    // From the cache (no request), then after a prune that must keep the second config's blob.
    await s.prune()
    const count = registry.requests().length
    expect(configOf(await s.pull(`${registry.host}/samelayers/two:1`, { policy: 'never' }))).toEqual(configOf(two))
    expect(configOf(await s.pull(`${registry.host}/samelayers/one:1`))).toEqual(configOf(one))
    expect(registry.requests().length).toBe(count)
  })

  it('picks this host from an index; an index without it is S102 naming the platforms it has', async () => {
    const layer = plainLayer(await tarLayer([{ name: 'arch', content: hostArch }]))
    const mine = await pushImage(registry, 'multi/app', null, [layer], {
      architecture: hostArch,
      ...(hostArch === 'arm64' && { variant: 'v8' }),
    })
    const otherLayer = plainLayer(await tarLayer([{ name: 'arch', content: otherArch }]))
    const theirs = await pushImage(registry, 'multi/app', null, [otherLayer], { architecture: otherArch })
    await pushIndex(registry, 'multi/app', 'both', [
      { image: theirs, architecture: otherArch, ...(otherArch === 'arm64' && { variant: 'v8' }) },
      { image: mine, architecture: hostArch, ...(hostArch === 'arm64' && { variant: 'v8' }) },
    ])
    await pushIndex(registry, 'multi/app', 'other-only', [
      { image: theirs, architecture: otherArch, ...(otherArch === 'arm64' && { variant: 'v8' }) },
    ])
    const s = store()
    const both = await s.pull(`${registry.host}/multi/app:both`)
    expect(fs.readFileSync(path.join(both.rootfs, 'arch'), 'utf8')).toBe(hostArch)
    const wanted = otherArch === 'arm64' ? 'linux/arm64/v8' : 'linux/amd64'
    await expect(s.pull(`${registry.host}/multi/app:other-only`)).rejects.toMatchObject({
      code: 'S102',
      retryable: false,
      message: expect.stringContaining(`it has ${wanted}`),
    })
    // Docker's schema 2: a manifest list of docker manifests, arm64 written without its variant.
    const dockerMine = await pushImage(
      registry,
      'multi/docker',
      null,
      [gzipLayer(await tarLayer([{ name: 'arch', content: `docker ${hostArch}` }]))],
      { architecture: hostArch },
      {},
      { docker: true },
    )
    const dockerTheirs = await pushImage(
      registry,
      'multi/docker',
      null,
      [otherLayer],
      { architecture: otherArch },
      {},
      { docker: true },
    )
    await pushIndex(
      registry,
      'multi/docker',
      'list',
      [
        { image: dockerTheirs, architecture: otherArch },
        { image: dockerMine, architecture: hostArch },
      ],
      { docker: true },
    )
    const docker = await s.pull(`${registry.host}/multi/docker:list`)
    expect(fs.readFileSync(path.join(docker.rootfs, 'arch'), 'utf8')).toBe(`docker ${hostArch}`)
    // A single-platform image for another architecture: S102 too.
    await expect(s.pull(`${registry.host}/multi/app@${theirs.manifestDigest}`)).rejects.toMatchObject({
      code: 'S102',
      message: expect.stringContaining(`built for linux/${otherArch}`),
    })
    // A digest the registry does not have, and a registry that is not there.
    await expect(s.pull(`${registry.host}/multi/app:missing`)).rejects.toMatchObject({
      code: 'S102',
      message: expect.stringContaining('not found'),
    })
    await expect(s.pull(`127.0.0.1:1/multi/app:1`)).rejects.toMatchObject({
      code: 'S102',
      message: expect.stringContaining('cannot reach'),
    })
  })

  it('keeps modes (without setuid and setgid bits), owners shifted to the sandbox range on a root host, and the tree digest of what was written', async () => {
    const layer = plainLayer(
      await tarLayer([
        { name: 'bin/', type: 'directory' },
        { name: 'bin/su', content: 'setuid root', mode: 0o4755 },
        { name: 'srv/', type: 'directory', uid: 33, gid: 33, mode: 0o750 },
        { name: 'srv/secret', content: 'www-data only', uid: 33, gid: 33, mode: 0o640 },
        { name: 'srv/again', type: 'link', linkname: 'srv/secret' },
      ]),
    )
    // Layer 2 rewrites a file of layer 1: the digest must be of the final bytes.
    const over = plainLayer(
      await tarLayer([{ name: 'srv/secret', content: 'rewritten', uid: 33, gid: 33, mode: 0o600 }]),
    )
    await pushImage(registry, 'modes/app', '1', [layer, over])
    const image = await store().pull(`${registry.host}/modes/app:1`)
    const asRoot = process.getuid?.() === 0
    const su = fs.statSync(path.join(image.rootfs, 'bin/su'))
    // No set-id file on the host (test/security/oci-unpack-bounds.test.ts).
    expect(su.mode & 0o7777).toBe(0o755)
    expect(su.uid).toBe(asRoot ? 1_000_000_000 : process.getuid?.())
    const secret = fs.statSync(path.join(image.rootfs, 'srv/secret'))
    expect([secret.mode & 0o7777, secret.uid, secret.gid]).toEqual(
      asRoot ? [0o600, 1_000_000_033, 1_000_000_033] : [0o600, process.getuid?.(), process.getgid?.()],
    )
    expect(fs.readFileSync(path.join(image.rootfs, 'srv/secret'), 'utf8')).toBe('rewritten')
    expect(fs.readFileSync(path.join(image.rootfs, 'srv/again'), 'utf8')).toBe('www-data only')
    expect(image.manifest.treeDigest).toBe((await summarizeTree(image.rootfs)).digest)
    // images.verify takes the reference, and sees a write into the published tree.
    expect(await store().verify(`${registry.host}/modes/app:1`)).toBe(true)
    fs.appendFileSync(path.join(image.rootfs, 'srv/secret'), '!')
    expect(await store().verify(`${registry.host}/modes/app:1`)).toBe(false)
    await expect(store().verify(`${registry.host}/modes/never:1`)).rejects.toMatchObject({ code: 'S101' })
  })
})

describe('OCI registry answers', () => {
  it('waits out 429 Too Many Requests (Retry-After) and 503, then pulls', async () => {
    const layer = plainLayer(await tarLayer([{ name: 'limited', content: 'after the wait' }]))
    await pushImage(registry, 'limited/app', '1', [layer])
    const answers: number[] = []
    let refusals = 2
    const front = http.createServer(async (req, res) => {
      if (refusals > 0) {
        refusals -= 1
        answers.push(refusals === 1 ? 429 : 503)
        res.writeHead(refusals === 1 ? 429 : 503, { 'retry-after': '1' })
        return res.end()
      }
      const upstream = await fetch(`${registry.url}${req.url}`, {
        headers: req.headers.accept ? { accept: req.headers.accept } : {},
      })
      answers.push(upstream.status)
      const headers: Record<string, string> = {}
      for (const h of ['content-type', 'docker-content-digest'])
        if (upstream.headers.get(h) !== null) headers[h] = upstream.headers.get(h) as string
      res.writeHead(upstream.status, headers)
      res.end(Buffer.from(await upstream.arrayBuffer()))
    })
    await new Promise<void>((resolve) => front.listen(0, '127.0.0.1', resolve))
    try {
      const host = `127.0.0.1:${(front.address() as { port: number }).port}`
      const image = await new ImageStore({ cacheDir: path.join(work, 'cache-429') }).pull(`${host}/limited/app:1`)
      expect(fs.readFileSync(path.join(image.rootfs, 'limited'), 'utf8')).toBe('after the wait')
      expect(answers).toEqual([429, 503, 200, 200, 200])
    } finally {
      front.close()
    }
  })
})

describe('OCI import', () => {
  it('imports a docker save tarball, an OCI layout directory and an oci-archive, all to the same rootfs', async () => {
    const raw = await tarLayer([
      { name: 'etc/', type: 'directory' },
      { name: 'etc/passwd', content: 'root:x:0:0:root:/root:/bin/sh\n' },
      { name: 'imported', content: 'yes' },
    ])
    const layer = gzipLayer(raw)
    const config = imageConfig([layer], { env: ['IMPORTED=1'] })
    const hex = (d: string) => d.slice('sha256:'.length)
    // OCI layout
    const layout = path.join(work, 'layout')
    fs.mkdirSync(path.join(layout, 'blobs', 'sha256'), { recursive: true })
    const manifest = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: 'application/vnd.oci.image.manifest.v1+json',
        config: { mediaType: 'application/vnd.oci.image.config.v1+json', digest: sha256(config), size: config.length },
        layers: [{ mediaType: layer.mediaType, digest: sha256(layer.blob), size: layer.blob.length }],
      }),
    )
    for (const blob of [config, layer.blob, manifest])
      fs.writeFileSync(path.join(layout, 'blobs', 'sha256', hex(sha256(blob))), blob)
    fs.writeFileSync(path.join(layout, 'oci-layout'), '{"imageLayoutVersion":"1.0.0"}')
    fs.writeFileSync(
      path.join(layout, 'index.json'),
      JSON.stringify({
        schemaVersion: 2,
        manifests: [
          { mediaType: 'application/vnd.oci.image.manifest.v1+json', digest: sha256(manifest), size: manifest.length },
        ],
      }),
    )
    // oci-archive: the same layout in a tar
    const archive = path.join(work, 'image.oci.tar')
    expect(spawnSync('tar', ['-C', layout, '-cf', archive, '.']).status).toBe(0)
    // docker save: manifest.json, <config>.json, <id>/layer.tar (uncompressed)
    const saved = path.join(work, 'saved')
    fs.mkdirSync(path.join(saved, 'abc'), { recursive: true })
    fs.writeFileSync(path.join(saved, `${hex(sha256(config))}.json`), config)
    fs.writeFileSync(path.join(saved, 'abc', 'layer.tar'), raw)
    fs.writeFileSync(
      path.join(saved, 'manifest.json'),
      JSON.stringify([{ Config: `${hex(sha256(config))}.json`, RepoTags: ['x:1'], Layers: ['abc/layer.tar'] }]),
    )
    const dockerTar = path.join(work, 'docker-save.tar')
    expect(spawnSync('tar', ['-C', saved, '-cf', dockerTar, '.']).status).toBe(0)

    const s = new ImageStore({ cacheDir: path.join(work, 'cache-import') })
    const fromLayout = await s.import(layout, { name: 'from-layout' })
    const fromArchive = await s.import(archive, { name: 'from-archive' })
    const fromDocker = await s.import(dockerTar, { name: 'from-docker' })
    expect(new Set([fromLayout.id, fromArchive.id, fromDocker.id]).size).toBe(1)
    expect(fs.readFileSync(path.join(fromDocker.rootfs, 'imported'), 'utf8')).toBe('yes')
    expect(fromDocker.manifest.oci?.config.env).toEqual({ IMPORTED: '1' })
    expect((await s.resolve('from-archive')).id).toBe(fromLayout.id)

    // A blob whose bytes do not match its name is refused; a tar of something else is S105.
    fs.writeFileSync(path.join(layout, 'blobs', 'sha256', hex(sha256(layer.blob))), Buffer.from('tampered'))
    await expect(
      new ImageStore({ cacheDir: path.join(work, 'cache-import2') }).import(layout, { name: 'tampered' }),
    ).rejects.toMatchObject({ code: 'S106', message: expect.stringContaining('does not match') })
    const notImage = path.join(work, 'not-image.tar')
    expect(spawnSync('tar', ['-C', path.join(saved, 'abc'), '-cf', notImage, '.']).status).toBe(0)
    await expect(s.import(notImage, { name: 'nope' })).rejects.toMatchObject({ code: 'S105' })
    await expect(s.import(path.join(work, 'missing.tar'), { name: 'nope' })).rejects.toMatchObject({ code: 'S104' })
    await expect(s.import(layout, { name: 'base' })).rejects.toMatchObject({ code: 'S107' })
    await expect(s.import(layout, { name: 'Bad Name' })).rejects.toMatchObject({ code: 'S001' })
  })
})
