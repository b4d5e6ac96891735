/**
 * A registry that trickles a body cannot hold a pull: a manifest at a byte at a time, a token
 * service that does the same, a config blob that keeps coming but never ends, a layer that
 * brings a few bytes per window. Each read has its deadline (small bodies: the whole answer
 * within one; layers: a floor of bytes per window), the pull fails S102 retryable naming what
 * it read and from where, the trickled socket is closed and no temporary is left. The
 * deadlines are made short here (RegistryOptions.deadlines); their defaults are a minute.
 */
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ImageCache } from '../../lib/images/cache.js'
import { pullImage } from '../../lib/images/oci/pull.js'
import { parseReference } from '../../lib/images/oci/reference.js'
import { imageConfig, plainLayer, sha256, tarLayer, type Layer } from '../images/oci-registry.js'

const DEADLINES = { smallMs: 800, headersMs: 800, windowMs: 200, windowBytes: 1024 }
const MANIFEST_TYPE = 'application/vnd.oci.image.manifest.v1+json'

let work: string
let layer: Layer

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-oci-deadlines-'))
  layer = plainLayer(await tarLayer([{ name: 'f', content: 'x'.repeat(4096) }]))
})

afterAll(() => {
  fs.rmSync(work, { recursive: true, force: true })
})

/** A response that sends `piece` every `everyMs` and never ends; `closed` settles when its socket closes. */
function trickle(res: http.ServerResponse, piece: Buffer, everyMs: number): Promise<void> {
  const timer = setInterval(() => res.write(piece), everyMs)
  return new Promise((resolve) =>
    res.on('close', () => {
      clearInterval(timer)
      resolve()
    }),
  )
}

interface FakeRegistry {
  host: string
  /** Settles when the trickled answer's socket is closed (by the client: the server never ends it). */
  trickleClosed: Promise<void>
  close(): Promise<void>
}

/** A registry on loopback whose `route` answers every request; it may start one trickle. */
async function fakeRegistry(
  route: (url: string, res: http.ServerResponse, startTrickle: (piece: Buffer, everyMs: number) => void) => void,
): Promise<FakeRegistry> {
  let markClosed!: () => void
  const trickleClosed = new Promise<void>((resolve) => (markClosed = resolve))
  const server = http.createServer((req, res) =>
    route(req.url ?? '', res, (piece, everyMs) => void trickle(res, piece, everyMs).then(markClosed)),
  )
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const host = `127.0.0.1:${(server.address() as { port: number }).port}`
  return {
    host,
    trickleClosed,
    close: async () => {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    },
  }
}

/** A manifest naming `config` (its digest and declared size) and the test's layer. */
function manifestOf(config: { digest: string; size: number }): Buffer {
  return Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MANIFEST_TYPE,
      config: { mediaType: 'application/vnd.oci.image.config.v1+json', ...config },
      layers: [{ mediaType: layer.mediaType, digest: sha256(layer.blob), size: layer.blob.length }],
    }),
  )
}

function pull(host: string, cacheDir: string) {
  return pullImage(new ImageCache(cacheDir), parseReference(`${host}/slow/app:1`), { deadlines: DEADLINES })
}

/** Temporaries a download left in the blob store. */
function ingestLeftovers(cacheDir: string): string[] {
  const blobs = path.join(cacheDir, 'blobs')
  return fs.existsSync(blobs) ? fs.readdirSync(blobs).filter((n) => n.startsWith('.ingest-')) : []
}

const failedRetryable = (text: string) => ({ code: 'S102', retryable: true, message: expect.stringContaining(text) })

describe('registry reads against a registry that trickles', () => {
  it('oci deadline: a manifest body sent a byte at a time fails within its deadline, naming the manifest and its URL; the socket is closed', async () => {
    const registry = await fakeRegistry((url, res, startTrickle) => {
      if (!url.startsWith('/v2/slow/app/manifests/')) return void res.writeHead(404).end()
      res.writeHead(200, { 'content-type': MANIFEST_TYPE, 'content-length': '4096' })
      startTrickle(Buffer.from('{'), 50)
    })
    try {
      const cacheDir = path.join(work, 'cache-manifest')
      await expect(pull(registry.host, cacheDir)).rejects.toMatchObject(
        failedRetryable(
          `manifest 1 from http://${registry.host}/v2/slow/app/manifests/1 was not whole within ${DEADLINES.smallMs} ms`,
        ),
      )
      await registry.trickleClosed
    } finally {
      await registry.close()
    }
  })

  it('oci deadline: a token body sent a byte at a time fails within its deadline, naming the token service; the socket is closed', async () => {
    const registry = await fakeRegistry((url, res, startTrickle) => {
      if (url.startsWith('/token')) {
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': '4096' })
        return startTrickle(Buffer.from(' '), 50)
      }
      res
        .writeHead(401, {
          'www-authenticate': `Bearer realm="http://${registry.host}/token",service="fake"`,
          connection: 'close',
        })
        .end()
    })
    try {
      await expect(pull(registry.host, path.join(work, 'cache-token'))).rejects.toMatchObject(
        failedRetryable(
          `the token from the token service "http://${registry.host}" was not whole within ${DEADLINES.smallMs} ms`,
        ),
      )
      await registry.trickleClosed
    } finally {
      await registry.close()
    }
  })

  it('oci deadline: a config blob that keeps coming but never ends fails at the small-body deadline; no temporary is left', async () => {
    const config = { digest: sha256('a config never sent whole'), size: 1024 * 1024 }
    const manifest = manifestOf(config)
    const registry = await fakeRegistry((url, res, startTrickle) => {
      if (url.startsWith('/v2/slow/app/manifests/'))
        return void res.writeHead(200, { 'content-type': MANIFEST_TYPE }).end(manifest)
      if (!url.endsWith(config.digest)) return void res.writeHead(404).end()
      // 1 KiB every 20 ms: well above the window's floor, and 20 s to send the whole.
      res.writeHead(200, { 'content-length': String(config.size) })
      startTrickle(Buffer.alloc(1024, 0x20), 20)
    })
    try {
      const cacheDir = path.join(work, 'cache-config')
      await expect(pull(registry.host, cacheDir)).rejects.toMatchObject(
        failedRetryable(
          `blob ${config.digest} from http://${registry.host}/v2/slow/app/blobs/${config.digest}: not whole within ${DEADLINES.smallMs} ms`,
        ),
      )
      await registry.trickleClosed
      expect(ingestLeftovers(cacheDir)).toEqual([])
    } finally {
      await registry.close()
    }
  })

  it('oci deadline: a layer that brings a few bytes per window fails at the window, however long it would go on; no temporary is left', async () => {
    const configBlob = imageConfig([layer])
    const manifest = manifestOf({ digest: sha256(configBlob), size: configBlob.length })
    const layerDigest = sha256(layer.blob)
    const registry = await fakeRegistry((url, res, startTrickle) => {
      if (url.startsWith('/v2/slow/app/manifests/'))
        return void res.writeHead(200, { 'content-type': MANIFEST_TYPE }).end(manifest)
      if (url.endsWith(sha256(configBlob))) return void res.writeHead(200).end(configBlob)
      if (!url.endsWith(layerDigest)) return void res.writeHead(404).end()
      // A byte every 20 ms: never silent for long, ten bytes a window.
      res.writeHead(200, { 'content-length': String(layer.blob.length) })
      startTrickle(Buffer.from('x'), 20)
    })
    try {
      const cacheDir = path.join(work, 'cache-layer')
      await expect(pull(registry.host, cacheDir)).rejects.toMatchObject({
        code: 'S102',
        retryable: true,
        message: expect.stringMatching(
          new RegExp(
            `blob ${layerDigest} from http://${registry.host}/v2/slow/app/blobs/${layerDigest}: ` +
              `\\d+ bytes in ${DEADLINES.windowMs} ms, fewer than the ${DEADLINES.windowBytes} a download must bring`,
          ),
        ),
      })
      await registry.trickleClosed
      expect(ingestLeftovers(cacheDir)).toEqual([])
    } finally {
      await registry.close()
    }
  })
})
