/**
 * The content-addressed blob store: `<cache>/blobs/sha256/<hex>`. A blob is written to a
 * private temporary file while it is hashed and counted, and renamed into place only when its
 * digest and size match: a tampered or truncated download is never stored.
 */
import { createHash, randomBytes } from 'node:crypto'
import fs from 'node:fs/promises'
import path from 'node:path'

const DIGEST = /^sha256:([0-9a-f]{64})$/

/** Bytes gathered before one write to the temporary file. */
const WRITE_BATCH_BYTES = 512 * 1024

export class DigestMismatch extends Error {}

/** `buffers` without their first `offset` bytes (what a short writev left), as views. */
function skipBytes(buffers: Buffer[], offset: number): Buffer[] {
  if (offset === 0) return buffers
  const rest: Buffer[] = []
  for (const b of buffers) {
    if (offset >= b.length) offset -= b.length
    else {
      rest.push(offset === 0 ? b : b.subarray(offset))
      offset = 0
    }
  }
  return rest
}

export class BlobStore {
  constructor(readonly root: string) {}

  path(digest: string): string {
    const m = DIGEST.exec(digest)
    if (m === null) throw new Error(`not a sha256 digest: ${JSON.stringify(digest)}`)
    return path.join(this.root, 'sha256', m[1])
  }

  async has(digest: string, size?: number): Promise<boolean> {
    const st = await fs.stat(this.path(digest)).catch(() => null)
    return st !== null && st.isFile() && (size === undefined || st.size === size)
  }

  async read(digest: string, maxBytes: number): Promise<Buffer> {
    const file = this.path(digest)
    const st = await fs.stat(file)
    if (st.size > maxBytes) throw new Error(`blob ${digest} is ${st.size} bytes (at most ${maxBytes})`)
    const data = await fs.readFile(file)
    if (`sha256:${createHash('sha256').update(data).digest('hex')}` !== digest)
      throw new DigestMismatch(`blob ${digest} in the store does not match its digest`)
    return data
  }

  /**
   * Stores what `source` yields under `digest` if it hashes to it. `size` (when known) is
   * both the expected length and a bound: a source that yields more is cut off.
   */
  async ingest(
    digest: string,
    size: number | null,
    maxBytes: number,
    source: AsyncIterable<Buffer>,
    onBytes?: (bytes: number) => void,
  ): Promise<string> {
    const final = this.path(digest)
    await fs.mkdir(path.dirname(final), { recursive: true })
    const tmp = path.join(this.root, `.ingest-${process.pid}-${randomBytes(6).toString('hex')}`)
    const limit = size ?? maxBytes
    const hash = createHash('sha256')
    const handle = await fs.open(tmp, 'wx', 0o644)
    let bytes = 0
    // Chunks are written a few hundred KB at a time: one write and one promise per network
    // chunk (~64 KB) was most of the event loop's work, and its garbage, during a pull.
    let pending: Buffer[] = []
    let pendingBytes = 0
    const flush = async () => {
      const batch = pending
      pending = []
      pendingBytes = 0
      let written = 0
      const total = batch.reduce((sum, b) => sum + b.length, 0)
      while (written < total) {
        const rest = skipBytes(batch, written)
        written += (await handle.writev(rest)).bytesWritten
      }
    }
    try {
      for await (const chunk of source) {
        bytes += chunk.length
        if (bytes > limit)
          throw new DigestMismatch(
            `blob ${digest} is larger than ${size === null ? `the limit of ${maxBytes} bytes` : `its declared ${size} bytes`}`,
          )
        hash.update(chunk)
        pending.push(chunk)
        pendingBytes += chunk.length
        if (pendingBytes >= WRITE_BATCH_BYTES) await flush()
        onBytes?.(bytes)
      }
      await flush()
      if (size !== null && bytes !== size)
        throw new DigestMismatch(`blob ${digest} is ${bytes} bytes, not its declared ${size}`)
      const actual = `sha256:${hash.digest('hex')}`
      if (actual !== digest) throw new DigestMismatch(`blob ${digest} does not match its content (got ${actual})`)
      await handle.sync()
      await handle.close()
      await fs.rename(tmp, final)
      return final
    } catch (err) {
      await handle.close().catch(() => undefined)
      await fs.rm(tmp, { force: true })
      throw err
    }
  }

  /** Stores bytes already in memory (manifests, configs, imports). */
  async put(digest: string, data: Buffer): Promise<string> {
    if (await this.has(digest, data.length)) return this.path(digest)
    return this.ingest(
      digest,
      data.length,
      data.length,
      (async function* () {
        yield data
      })(),
    )
  }

  async list(): Promise<string[]> {
    const names = await fs.readdir(path.join(this.root, 'sha256')).catch(() => [] as string[])
    return names.filter((n) => /^[0-9a-f]{64}$/.test(n)).map((n) => `sha256:${n}`)
  }

  async remove(digest: string): Promise<void> {
    await fs.rm(this.path(digest), { force: true })
  }

  /** Leftovers of downloads whose process died. */
  async sweep(isAlive: (pid: number) => boolean): Promise<void> {
    for (const name of await fs.readdir(this.root).catch(() => [] as string[])) {
      const m = /^\.ingest-(\d+)-/.exec(name)
      if (m !== null && !isAlive(Number(m[1])))
        await fs.rm(path.join(this.root, name), { force: true, recursive: true })
    }
  }
}
