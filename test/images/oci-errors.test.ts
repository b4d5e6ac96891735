/**
 * A failed pull is S102 with retry advice from its cause, against a real registry: refused
 * credentials, a missing tag, no manifest for this platform and a tampered blob fail the same
 * way next time (retryable false); a registry that answers 503 and then goes away, or is not
 * there at all, may answer later (retryable true).
 */
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ImageStore } from '../../lib/images/index.js'
import { plainLayer, pushImage, pushIndex, startRegistry, tarLayer, type Registry } from './oci-registry.js'

const USER = 'bob'
const PASSWORD = 'right-pw'
const basic = `Basic ${Buffer.from(`${USER}:${PASSWORD}`).toString('base64')}`
const hostArch = process.arch === 'x64' ? 'amd64' : 'arm64'
const otherArch = hostArch === 'amd64' ? 'arm64' : 'amd64'

let open: Registry
let locked: Registry
let work: string
const savedDockerConfig = process.env.DOCKER_CONFIG

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-oci-errors-'))
  ;[open, locked] = await Promise.all([startRegistry(), startRegistry({ user: USER, password: PASSWORD })])
})

afterAll(async () => {
  process.env.DOCKER_CONFIG = savedDockerConfig
  await Promise.all([open?.stop(), locked?.stop()])
  fs.rmSync(work, { recursive: true, force: true })
})

const store = (name: string) => new ImageStore({ cacheDir: path.join(work, name) })

/** A front for the open registry on another port; `answer` may answer a request itself (true) or let it through. */
async function front(
  answer: (req: http.IncomingMessage, res: http.ServerResponse, server: http.Server) => boolean,
  rewrite?: (url: string, body: Buffer) => Buffer,
): Promise<{ host: string; server: http.Server }> {
  const server = http.createServer(async (req, res) => {
    if (answer(req, res, server)) return
    const upstream = await fetch(`${open.url}${req.url}`, {
      headers: req.headers.accept ? { accept: req.headers.accept } : {},
    })
    const headers: Record<string, string> = {}
    for (const h of ['content-type', 'docker-content-digest'])
      if (upstream.headers.get(h) !== null) headers[h] = upstream.headers.get(h) as string
    const body = Buffer.from(await upstream.arrayBuffer())
    res.writeHead(upstream.status, headers)
    res.end(rewrite === undefined ? body : rewrite(req.url ?? '', body))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { host: `127.0.0.1:${(server.address() as { port: number }).port}`, server }
}

describe('OCI pull errors: retry advice from the cause', () => {
  it('refused credentials are S102 not worth retrying', async () => {
    await pushImage(
      locked,
      'private/app',
      '1',
      [plainLayer(await tarLayer([{ name: 'secret', content: 'x' }]))],
      {},
      { authorization: basic },
    )
    const dir = fs.mkdtempSync(path.join(work, 'docker-'))
    process.env.DOCKER_CONFIG = dir
    fs.writeFileSync(
      path.join(dir, 'config.json'),
      JSON.stringify({ auths: { [locked.host]: { auth: Buffer.from(`${USER}:wrong`).toString('base64') } } }),
    )
    await expect(store('auth').pull(`${locked.host}/private/app:1`)).rejects.toMatchObject({
      code: 'S102',
      retryable: false,
      message: expect.stringContaining('access denied'),
    })
    fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify({}))
    await expect(store('auth').pull(`${locked.host}/private/app:1`)).rejects.toMatchObject({
      code: 'S102',
      retryable: false,
      message: expect.stringContaining('requires credentials'),
    })
    fs.writeFileSync(
      path.join(dir, 'config.json'),
      JSON.stringify({ auths: { [locked.host]: { auth: Buffer.from(`${USER}:${PASSWORD}`).toString('base64') } } }),
    )
    expect((await store('auth').pull(`${locked.host}/private/app:1`)).id).toMatch(/^[0-9a-f]{64}$/)
  })

  it('no manifest for this platform, a missing tag and a tampered blob are S102 not worth retrying', async () => {
    const theirs = await pushImage(
      open,
      'elsewhere/app',
      null,
      [plainLayer(await tarLayer([{ name: 'arch', content: otherArch }]))],
      { architecture: otherArch },
    )
    await pushIndex(open, 'elsewhere/app', 'other-only', [
      { image: theirs, architecture: otherArch, ...(otherArch === 'arm64' && { variant: 'v8' }) },
    ])
    await expect(store('platform').pull(`${open.host}/elsewhere/app:other-only`)).rejects.toMatchObject({
      code: 'S102',
      retryable: false,
      message: expect.stringContaining("no manifest for this host's platform"),
    })
    await expect(store('platform').pull(`${open.host}/elsewhere/app@${theirs.manifestDigest}`)).rejects.toMatchObject({
      code: 'S102',
      retryable: false,
      message: expect.stringContaining(`built for linux/${otherArch}`),
    })
    await expect(store('platform').pull(`${open.host}/elsewhere/app:missing`)).rejects.toMatchObject({
      code: 'S102',
      retryable: false,
      message: expect.stringContaining('not found'),
    })

    await pushImage(open, 'tampered/app', '1', [
      plainLayer(await tarLayer([{ name: 'file', content: 'the real bytes' }])),
    ])
    const flip = await front(
      () => false,
      (url, body) =>
        url.includes('/blobs/') && body.includes('the real bytes')
          ? Buffer.from(body.toString('latin1').replace('the real bytes', 'the evil bytes'), 'latin1')
          : body,
    )
    try {
      await expect(store('tampered').pull(`${flip.host}/tampered/app:1`)).rejects.toMatchObject({
        code: 'S102',
        retryable: false,
        message: expect.stringContaining('does not match its content'),
      })
    } finally {
      flip.server.close()
    }
  })

  it('a registry that answers 503 and then goes away, or is not there, is S102 worth retrying', async () => {
    await pushImage(open, 'flaky/app', '1', [plainLayer(await tarLayer([{ name: 'f', content: 'y' }]))])
    let answered = 0
    const flaky = await front((_req, res, server) => {
      answered += 1
      // The 503 goes out, then the registry is gone: the retry after Retry-After finds no one listening.
      res.writeHead(503, { 'retry-after': '0', connection: 'close' })
      res.end(() => {
        server.close()
        server.closeAllConnections()
      })
      return true
    })
    await expect(store('flaky').pull(`${flaky.host}/flaky/app:1`)).rejects.toMatchObject({
      code: 'S102',
      retryable: true,
      message: expect.stringContaining('cannot reach'),
    })
    expect(answered).toBe(1)
    await expect(store('gone').pull('127.0.0.1:1/flaky/app:1')).rejects.toMatchObject({
      code: 'S102',
      retryable: true,
      message: expect.stringContaining('cannot reach'),
    })
  })
})
