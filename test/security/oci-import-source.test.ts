/**
 * images.import() of anything but a regular file or a directory is refused at once (S105 naming
 * the path and what it is) and never holds one of libuv's threads: /dev/zero (read for ever,
 * burning a CPU), FIFOs nobody writes (an open of one waits for a writer in a pool thread: four
 * such imports held every thread, and the host's own fs.readFile and dns.lookup hung with them),
 * a unix socket, and a symbolic link to /dev/zero. Nothing is left in the cache.
 */
import { execFileSync } from 'node:child_process'
import dns from 'node:dns/promises'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ImageStore } from '../../lib/images/index.js'

let work: string
let cacheDir: string
const fifos: string[] = []

beforeAll(() => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-oci-import-source-'))
  cacheDir = path.join(work, 'cache')
})

afterAll(() => {
  // Had an import opened a FIFO (the defence missing), its open would wait for ever: a writer ends it.
  for (const fifo of fifos) {
    try {
      fs.closeSync(fs.openSync(fifo, fs.constants.O_RDWR | fs.constants.O_NONBLOCK))
    } catch {
      // Already gone.
    }
  }
  fs.rmSync(work, { recursive: true, force: true })
})

const store = () => new ImageStore({ cacheDir })

const refused = (source: string, kind: string) => ({
  code: 'S105',
  message: expect.stringContaining(`image archive ${source} is ${kind}, not a regular file or a directory`),
})

/** What an import left in the cache: temporaries of the blob store, build directories. */
function leftovers(): string[] {
  if (!fs.existsSync(cacheDir)) return []
  return (fs.readdirSync(cacheDir, { recursive: true }) as string[]).filter((n) => /\.ingest-|\.tmp/.test(n))
}

describe('images.import of what is no image archive', () => {
  it('oci import: /dev/zero is refused at once as a character device, not read', async () => {
    await expect(store().import('/dev/zero', { name: 'zero' })).rejects.toMatchObject(
      refused('/dev/zero', 'a character device'),
    )
    expect(leftovers()).toEqual([])
  })

  it("oci import: FIFOs nobody writes, more than libuv's threads at once, are refused while the host's fs.readFile and dns.lookup still answer", async () => {
    const count = Number(process.env.UV_THREADPOOL_SIZE ?? 4) + 2
    for (let i = 0; i < count; i += 1) {
      const fifo = path.join(work, `fifo-${i}`)
      execFileSync('mkfifo', [fifo])
      fifos.push(fifo)
    }
    const imports = fifos.map((fifo, i) => store().import(fifo, { name: `fifo-${i}` }))
    // Each import either refused already or is in flight: the pool's threads must still serve the host.
    for (const attempt of imports) attempt.catch(() => undefined)
    const [text, address] = await Promise.all([
      fs.promises.readFile(path.join(process.cwd(), 'package.json'), 'utf8'),
      dns.lookup('localhost'),
    ])
    expect(JSON.parse(text).name).toBe('krunbox')
    expect(address.address).toMatch(/^(127\.0\.0\.1|::1)$/)
    for (const [i, attempt] of imports.entries())
      await expect(attempt).rejects.toMatchObject(refused(fifos[i], 'a FIFO'))
    expect(leftovers()).toEqual([])
  })

  it('oci import: a unix socket is refused as a socket', async () => {
    const socket = path.join(work, 'image.sock')
    const server = net.createServer()
    await new Promise<void>((resolve) => server.listen(socket, resolve))
    try {
      await expect(store().import(socket, { name: 'socket' })).rejects.toMatchObject(refused(socket, 'a socket'))
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
    expect(leftovers()).toEqual([])
  })

  it('oci import: a symbolic link to /dev/zero is refused as what it names, a character device', async () => {
    const link = path.join(work, 'image.tar')
    fs.symlinkSync('/dev/zero', link)
    await expect(store().import(link, { name: 'zero-link' })).rejects.toMatchObject(refused(link, 'a character device'))
    expect(leftovers()).toEqual([])
  })
})
