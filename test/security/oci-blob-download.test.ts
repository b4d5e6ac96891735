/**
 * A hostile registry against the blob download worker: a body that never ends (more than the
 * blob's declared size) is cut off at that size and refused, with nothing stored and no
 * temporary file left; the pulling process reads no more than it was promised; and the worker
 * ends with the pull, failed or not (a process that pulled exits by itself).
 */
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { plainLayer, pushImage, startRegistry, tarLayer, type Registry } from '../images/oci-registry.js'

const CHILD = path.resolve('test/fixtures/oci-pull-child.ts')
let registry: Registry
let work: string

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-oci-download-'))
  registry = await startRegistry()
  await pushImage(registry, 'endless/app', '1', [
    plainLayer(await tarLayer([{ name: 'file', content: 'x'.repeat(64 * 1024) }])),
  ])
})

afterAll(async () => {
  await registry?.stop()
  fs.rmSync(work, { recursive: true, force: true })
})

/** Pulls in another process, which must exit by itself within the timeout. */
function pullInChild(ref: string, cacheDir: string): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, ['--import', 'tsx', CHILD, ref, cacheDir], { timeout: 60_000 }, (err, stdout, stderr) =>
      err ? reject(new Error(`${err.message} (killed: ${err.killed})\n${stderr}`)) : resolve(JSON.parse(stdout)),
    )
  })
}

/** Every file under the cache's blob store, temporaries included. */
function blobFiles(cacheDir: string): string[] {
  const root = path.join(cacheDir, 'blobs')
  return fs.existsSync(root) ? (fs.readdirSync(root, { recursive: true }) as string[]) : []
}

describe('the blob download worker against a hostile registry', () => {
  it('oci download: an endless blob body is cut off at its declared size and refused; nothing stored, no temporary left, the worker gone', async () => {
    let sentToLayer = 0
    let layerDigest = ''
    // Serves everything from the registry, but a layer's body as its bytes followed by zeros for ever.
    const hostile = http.createServer(async (req, res) => {
      const upstream = await fetch(`${registry.url}${req.url}`, {
        headers: req.headers.accept ? { accept: req.headers.accept } : {},
      })
      const body = Buffer.from(await upstream.arrayBuffer())
      const headers: Record<string, string> = {}
      for (const h of ['content-type', 'docker-content-digest'])
        if (upstream.headers.get(h) !== null) headers[h] = upstream.headers.get(h) as string
      const isLayer = req.url?.includes('/blobs/') && body.length > 4096
      if (!isLayer) {
        res.writeHead(upstream.status, headers)
        return res.end(body)
      }
      layerDigest = /blobs\/(sha256:[0-9a-f]{64})/.exec(req.url as string)![1]
      res.writeHead(200, headers)
      sentToLayer += body.length
      res.write(body)
      const zeros = Buffer.alloc(64 * 1024)
      const more = () => {
        while (!res.destroyed && sentToLayer < 512 * 1024 * 1024) {
          sentToLayer += zeros.length
          if (!res.write(zeros)) return void res.once('drain', more)
        }
        res.end()
      }
      res.on('close', () => res.destroy())
      more()
    })
    await new Promise<void>((resolve) => hostile.listen(0, '127.0.0.1', resolve))
    try {
      const host = `127.0.0.1:${(hostile.address() as { port: number }).port}`
      const cacheDir = path.join(work, 'cache-endless')
      const outcome = await pullInChild(`${host}/endless/app:1`, cacheDir)
      expect(outcome).toMatchObject({ code: 'S102', retryable: false })
      expect(outcome.message).toContain('larger than its declared')
      // The child stopped reading at the declared size: what the server got out is that plus
      // what the socket buffers held, far from the 512 MiB it would have sent.
      expect(sentToLayer).toBeLessThan(32 * 1024 * 1024)
      const files = blobFiles(cacheDir)
      expect(files.filter((f) => f.includes('.ingest-'))).toEqual([])
      expect(files.some((f) => f.endsWith(layerDigest.slice('sha256:'.length)))).toBe(false)
    } finally {
      hostile.close()
    }
  })

  it('oci download: the worker ends with a pull that succeeded too (the process exits by itself)', async () => {
    const outcome = await pullInChild(`${registry.host}/endless/app:1`, path.join(work, 'cache-ok'))
    expect(outcome.id).toMatch(/^[0-9a-f]{64}$/)
  })
})
