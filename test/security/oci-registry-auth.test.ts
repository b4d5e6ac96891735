/**
 * Registry credentials: a private repository (htpasswd Basic auth on a real registry) pulls
 * only with credentials from the Docker config (auths or a credential helper), and the
 * credentials never follow a redirect to another origin (here another port), where a blob
 * download is sent as registries backed by object storage do.
 */
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ImageStore } from '../../lib/images/index.js'
import { plainLayer, pushImage, startRegistry, tarLayer, type Registry } from '../images/oci-registry.js'

const USER = 'alice'
const PASSWORD = 's3cret-pw'
const basic = `Basic ${Buffer.from(`${USER}:${PASSWORD}`).toString('base64')}`

let registry: Registry
let work: string
const savedEnv = { DOCKER_CONFIG: process.env.DOCKER_CONFIG, PATH: process.env.PATH }

function dockerConfig(content: object): void {
  const dir = fs.mkdtempSync(path.join(work, 'docker-'))
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(content))
  process.env.DOCKER_CONFIG = dir
}

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-oci-auth-'))
  registry = await startRegistry({ user: USER, password: PASSWORD })
  const layer = plainLayer(await tarLayer([{ name: 'secret', content: 'private bytes' }]))
  await pushImage(registry, 'private/app', '1', [layer], {}, { authorization: basic })
})

afterAll(async () => {
  process.env.DOCKER_CONFIG = savedEnv.DOCKER_CONFIG
  process.env.PATH = savedEnv.PATH
  await registry?.stop()
  fs.rmSync(work, { recursive: true, force: true })
})

describe('OCI registry credentials', () => {
  it('oci auth: a private repository without credentials is refused (S102 saying so), with auths it pulls', async () => {
    dockerConfig({})
    const store = new ImageStore({ cacheDir: path.join(work, 'cache-auths') })
    await expect(store.pull(`${registry.host}/private/app:1`)).rejects.toMatchObject({
      code: 'S102',
      message: expect.stringContaining('requires credentials'),
    })
    dockerConfig({ auths: { [`http://${registry.host}`]: { auth: Buffer.from(`${USER}:wrong`).toString('base64') } } })
    await expect(store.pull(`${registry.host}/private/app:1`)).rejects.toMatchObject({
      code: 'S102',
      message: expect.stringContaining('access denied'),
    })
    dockerConfig({ auths: { [registry.host]: { auth: Buffer.from(`${USER}:${PASSWORD}`).toString('base64') } } })
    const image = await store.pull(`${registry.host}/private/app:1`)
    expect(fs.readFileSync(path.join(image.rootfs, 'secret'), 'utf8')).toBe('private bytes')
  })

  it('oci auth: credentials come from a credential helper (credHelpers) on PATH', async () => {
    const bin = fs.mkdtempSync(path.join(work, 'bin-'))
    const asked = path.join(work, 'helper-asked')
    fs.writeFileSync(
      path.join(bin, 'docker-credential-test'),
      `#!/bin/sh\n[ "$1" = get ] || exit 1\nread server\necho "$server" > ${asked}\nprintf '{"ServerURL":"%s","Username":"${USER}","Secret":"${PASSWORD}"}' "$server"\n`,
      { mode: 0o755 },
    )
    process.env.PATH = `${bin}:${savedEnv.PATH}`
    dockerConfig({ credHelpers: { [registry.host]: 'test' } })
    const store = new ImageStore({ cacheDir: path.join(work, 'cache-helper') })
    const image = await store.pull(`${registry.host}/private/app:1`)
    expect(fs.readFileSync(path.join(image.rootfs, 'secret'), 'utf8')).toBe('private bytes')
    expect(fs.readFileSync(asked, 'utf8').trim()).toBe(registry.host)
    // credsStore: the same helper for every registry.
    dockerConfig({ credsStore: 'test' })
    const viaStore = await new ImageStore({ cacheDir: path.join(work, 'cache-store') }).pull(
      `${registry.host}/private/app:1`,
    )
    expect(viaStore.id).toBe(image.id)
    process.env.PATH = savedEnv.PATH
  })

  it('oci auth: a redirect to another port never receives the Authorization header', async () => {
    // The other origin: records what it is sent, serves the blob it is asked for.
    const seen: Array<string | undefined> = []
    const other = http.createServer(async (req, res) => {
      seen.push(req.headers.authorization)
      const upstream = await fetch(`${registry.url}${new URL(req.url as string, 'http://x').searchParams.get('p')}`, {
        headers: { authorization: basic },
      })
      res.writeHead(upstream.status, { 'content-type': 'application/octet-stream' })
      res.end(Buffer.from(await upstream.arrayBuffer()))
    })
    // The registry's front: blob GETs are redirected to the other origin, the rest proxied.
    const front = http.createServer(async (req, res) => {
      const url = req.url as string
      if (req.method === 'GET' && /\/blobs\/sha256:/.test(url)) {
        if (req.headers.authorization !== basic) {
          res.writeHead(401, { 'www-authenticate': 'Basic realm="front"' })
          return res.end()
        }
        res.writeHead(307, {
          location: `http://127.0.0.1:${(other.address() as { port: number }).port}/storage?p=${encodeURIComponent(url)}`,
        })
        return res.end()
      }
      const upstream = await fetch(`${registry.url}${url}`, {
        method: req.method,
        headers: {
          ...(req.headers.authorization && { authorization: req.headers.authorization }),
          ...(req.headers.accept && { accept: req.headers.accept }),
        },
      })
      const headers: Record<string, string> = {}
      for (const h of ['content-type', 'docker-content-digest', 'www-authenticate']) {
        const v = upstream.headers.get(h)
        if (v !== null) headers[h] = v
      }
      res.writeHead(upstream.status, headers)
      res.end(Buffer.from(await upstream.arrayBuffer()))
    })
    await Promise.all([
      new Promise<void>((r) => other.listen(0, '127.0.0.1', r)),
      new Promise<void>((r) => front.listen(0, '127.0.0.1', r)),
    ])
    try {
      const frontHost = `127.0.0.1:${(front.address() as { port: number }).port}`
      dockerConfig({ auths: { [frontHost]: { username: USER, password: PASSWORD } } })
      const store = new ImageStore({ cacheDir: path.join(work, 'cache-redirect') })
      const image = await store.pull(`${frontHost}/private/app:1`)
      expect(fs.readFileSync(path.join(image.rootfs, 'secret'), 'utf8')).toBe('private bytes')
      expect(seen.length).toBe(2) // config and layer, both through the redirect
      expect(seen).toEqual([undefined, undefined])
    } finally {
      other.close()
      front.close()
    }
  })
})
