/**
 * Test fixture: Debian's docker-registry (CNCF distribution) as a child process on
 * 127.0.0.1:<free port>, with throwaway config and storage, optional htpasswd Basic auth; and
 * images built in memory (tar-stream layers) pushed over the distribution API.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { createHash } from 'node:crypto'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import zlib from 'node:zlib'
import tarStream from 'tar-stream'

export const REGISTRY_BIN = '/usr/bin/docker-registry'

export interface Registry {
  host: string
  url: string
  dir: string
  /** Requests the registry logged: method and path. */
  requests(): Array<{ method: string; uri: string }>
  stop(): Promise<void>
}

export function sha256(data: Buffer | string): string {
  return `sha256:${createHash('sha256').update(data).digest('hex')}`
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo
      server.close(() => resolve(port))
    })
  })
}

export interface TokenAuth {
  realm: string
  service: string
  issuer: string
  /** PEM certificate whose key signs the tokens. */
  certFile: string
}

export async function startRegistry(
  options: { user?: string; password?: string; token?: TokenAuth } = {},
): Promise<Registry> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-registry-'))
  const port = await freePort()
  let auth = ''
  if (options.user !== undefined) {
    const hashed = spawnSync('htpasswd', ['-nbB', options.user, options.password ?? ''], { encoding: 'utf8' })
    if (hashed.status !== 0) throw new Error(`htpasswd failed: ${hashed.stderr}`)
    fs.writeFileSync(path.join(dir, 'htpasswd'), hashed.stdout)
    auth = `auth:\n  htpasswd:\n    realm: krunbox-test\n    path: ${path.join(dir, 'htpasswd')}\n`
  }
  if (options.token !== undefined) {
    const t = options.token
    auth = `auth:\n  token:\n    realm: ${t.realm}\n    service: ${t.service}\n    issuer: ${t.issuer}\n    rootcertbundle: ${t.certFile}\n`
  }
  fs.writeFileSync(
    path.join(dir, 'config.yml'),
    `version: 0.1\nlog:\n  level: info\n  formatter: text\nstorage:\n  filesystem:\n    rootdirectory: ${path.join(dir, 'data')}\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:${port}\n  secret: krunbox-test-secret\n${auth}`,
  )
  const child: ChildProcess = spawn(REGISTRY_BIN, ['serve', path.join(dir, 'config.yml')], {
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const log: string[] = []
  let partial = ''
  const onData = (chunk: Buffer) => {
    const lines = (partial + chunk.toString('utf8')).split('\n')
    partial = lines.pop() as string
    log.push(...lines)
  }
  child.stdout?.on('data', onData)
  child.stderr?.on('data', onData)
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  const url = `http://127.0.0.1:${port}`
  // Ready when it answers /v2/ (401 with auth, 200 without).
  for (let i = 0; ; i += 1) {
    const ok = await fetch(`${url}/v2/`).then(
      (r) => r.status === 200 || r.status === 401,
      () => false,
    )
    if (ok) break
    if (child.exitCode !== null || i > 400) throw new Error(`docker-registry did not start:\n${log.join('\n')}`)
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
  return {
    host: `127.0.0.1:${port}`,
    url,
    dir,
    requests: () =>
      log
        .filter((l) => l.includes('response completed'))
        .map((l) => ({
          method: /http\.request\.method=(\w+)/.exec(l)?.[1] ?? '',
          uri: ((m) => m?.[1] ?? m?.[2] ?? '')(/http\.request\.uri=(?:"([^"]+)"|(\S+))/.exec(l)),
        })),
    stop: async () => {
      child.kill('SIGTERM')
      await exited
      fs.rmSync(dir, { recursive: true, force: true })
    },
  }
}

export interface TarEntry {
  name: string
  type?: 'file' | 'directory' | 'symlink' | 'link' | 'character-device' | 'fifo'
  content?: string | Buffer
  linkname?: string
  mode?: number
  uid?: number
  gid?: number
  pax?: Record<string, string>
}

/** An uncompressed layer in memory. */
export async function tarLayer(entries: TarEntry[]): Promise<Buffer> {
  const pack = tarStream.pack()
  for (const e of entries) {
    const type = e.type ?? 'file'
    const mode = e.mode ?? (type === 'directory' ? 0o755 : 0o644)
    const header = {
      name: e.name,
      type,
      mode,
      uid: e.uid ?? 0,
      gid: e.gid ?? 0,
      linkname: e.linkname,
      mtime: new Date(0),
      pax: e.pax,
      ...(type === 'character-device' && { devmajor: 1, devminor: 3 }),
    }
    if (type === 'file') pack.entry(header, e.content ?? '')
    else pack.entry(header)
  }
  pack.finalize()
  const chunks: Buffer[] = []
  for await (const c of pack) chunks.push(c as Buffer)
  return Buffer.concat(chunks)
}

/** A layer of a host directory (the base preset's rootfs), written by the system tar. */
export function tarDirectory(dir: string): Buffer {
  const out = spawnSync('tar', ['-C', dir, '--owner=0', '--group=0', '--numeric-owner', '-cf', '-', '.'], {
    maxBuffer: 1024 ** 3,
  })
  if (out.status !== 0) throw new Error(`tar failed: ${out.stderr}`)
  return out.stdout
}

export interface Layer {
  /** As stored in the registry (compressed or not). */
  blob: Buffer
  diffId: string
  mediaType: string
}

export function gzipLayer(raw: Buffer): Layer {
  return {
    blob: zlib.gzipSync(raw, { level: 1 }),
    diffId: sha256(raw),
    mediaType: 'application/vnd.oci.image.layer.v1.tar+gzip',
  }
}

export function plainLayer(raw: Buffer): Layer {
  return { blob: raw, diffId: sha256(raw), mediaType: 'application/vnd.oci.image.layer.v1.tar' }
}

export interface ImageConfigInput {
  env?: string[]
  workingDir?: string
  user?: string
  cmd?: string[]
  entrypoint?: string[]
  labels?: Record<string, string>
  exposedPorts?: string[]
  architecture?: string
  variant?: string
}

export function imageConfig(layers: Layer[], c: ImageConfigInput = {}): Buffer {
  const hostArch = process.arch === 'x64' ? 'amd64' : process.arch
  return Buffer.from(
    JSON.stringify({
      architecture: c.architecture ?? hostArch,
      ...(c.variant && { variant: c.variant }),
      os: 'linux',
      config: {
        Env: c.env,
        WorkingDir: c.workingDir,
        User: c.user,
        Cmd: c.cmd,
        Entrypoint: c.entrypoint,
        Labels: c.labels,
        ExposedPorts: c.exposedPorts && Object.fromEntries(c.exposedPorts.map((p) => [p, {}])),
      },
      rootfs: { type: 'layers', diff_ids: layers.map((l) => l.diffId) },
    }),
  )
}

export interface PushAuth {
  authorization?: string
}

async function call(url: string, init: RequestInit, auth: PushAuth): Promise<Response> {
  const res = await fetch(url, {
    ...init,
    headers: {
      ...(init.headers as Record<string, string>),
      ...(auth.authorization && { authorization: auth.authorization }),
    },
  })
  if (!res.ok) throw new Error(`${init.method ?? 'GET'} ${url}: HTTP ${res.status} ${await res.text()}`)
  return res
}

export async function pushBlob(registry: Registry, repo: string, data: Buffer, auth: PushAuth = {}): Promise<string> {
  const digest = sha256(data)
  const start = await call(`${registry.url}/v2/${repo}/blobs/uploads/`, { method: 'POST' }, auth)
  await start.arrayBuffer()
  const location = new URL(start.headers.get('location') as string, registry.url)
  location.searchParams.set('digest', digest)
  await (
    await call(
      location.toString(),
      { method: 'PUT', body: data, headers: { 'content-type': 'application/octet-stream' } },
      auth,
    )
  ).arrayBuffer()
  return digest
}

export async function pushManifest(
  registry: Registry,
  repo: string,
  reference: string,
  body: Buffer,
  mediaType: string,
  auth: PushAuth = {},
): Promise<string> {
  await (
    await call(
      `${registry.url}/v2/${repo}/manifests/${reference}`,
      { method: 'PUT', body, headers: { 'content-type': mediaType } },
      auth,
    )
  ).arrayBuffer()
  return sha256(body)
}

export interface PushedImage {
  manifestDigest: string
  manifest: Buffer
  configDigest: string
}

/** Pushes layers, config and an OCI manifest under `tag` (or only by digest when tag is null). */
/** Media types of Docker's schema 2 (docker push) instead of OCI's. */
const DOCKER_TYPES: Record<string, string> = {
  'application/vnd.oci.image.manifest.v1+json': 'application/vnd.docker.distribution.manifest.v2+json',
  'application/vnd.oci.image.config.v1+json': 'application/vnd.docker.container.image.v1+json',
  'application/vnd.oci.image.layer.v1.tar+gzip': 'application/vnd.docker.image.rootfs.diff.tar.gzip',
  'application/vnd.oci.image.layer.v1.tar': 'application/vnd.docker.image.rootfs.diff.tar',
}

export async function pushImage(
  registry: Registry,
  repo: string,
  tag: string | null,
  layers: Layer[],
  config: ImageConfigInput = {},
  auth: PushAuth = {},
  options: { docker?: boolean } = {},
): Promise<PushedImage> {
  const t = (type: string) => (options.docker ? (DOCKER_TYPES[type] ?? type) : type)
  const configBlob = imageConfig(layers, config)
  const configDigest = await pushBlob(registry, repo, configBlob, auth)
  for (const l of layers) await pushBlob(registry, repo, l.blob, auth)
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: t('application/vnd.oci.image.manifest.v1+json'),
      config: {
        mediaType: t('application/vnd.oci.image.config.v1+json'),
        digest: configDigest,
        size: configBlob.length,
      },
      layers: layers.map((l) => ({ mediaType: t(l.mediaType), digest: sha256(l.blob), size: l.blob.length })),
    }),
  )
  const manifestDigest = await pushManifest(
    registry,
    repo,
    tag ?? sha256(manifest),
    manifest,
    t('application/vnd.oci.image.manifest.v1+json'),
    auth,
  )
  return { manifestDigest, manifest, configDigest }
}

export async function pushIndex(
  registry: Registry,
  repo: string,
  tag: string,
  entries: Array<{ image: PushedImage; architecture: string; variant?: string }>,
  options: { docker?: boolean } = {},
): Promise<string> {
  const listType = options.docker
    ? 'application/vnd.docker.distribution.manifest.list.v2+json'
    : 'application/vnd.oci.image.index.v1+json'
  const index = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: listType,
      manifests: entries.map((e) => ({
        mediaType: options.docker
          ? 'application/vnd.docker.distribution.manifest.v2+json'
          : 'application/vnd.oci.image.manifest.v1+json',
        digest: e.image.manifestDigest,
        size: e.image.manifest.length,
        platform: { os: 'linux', architecture: e.architecture, ...(e.variant && { variant: e.variant }) },
      })),
    }),
  )
  return pushManifest(registry, repo, tag, index, listType)
}

/** Blob downloads the registry served (GET .../blobs/...), by digest. */
export function blobGets(registry: Registry): string[] {
  return registry
    .requests()
    .filter((r) => r.method === 'GET' && /\/blobs\/sha256:/.test(r.uri))
    .map((r) => r.uri.slice(r.uri.lastIndexOf('/') + 1))
}
