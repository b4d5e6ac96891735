/**
 * The content-addressed blob store: `<cache>/blobs/sha256/<hex>`. A blob is written to a
 * private temporary file while it is hashed and counted, and renamed into place only when its
 * digest and size match (blob-transfer.ts's storeVerified, which the download worker runs too):
 * a tampered or truncated download is never stored.
 */
import { createHash } from 'node:crypto'
import { createRequire } from 'node:module'
import fs from 'node:fs/promises'
import path from 'node:path'
import { storeVerified, type StoreInput } from './blob-transfer.js'

const DIGEST = /^sha256:([0-9a-f]{64})$/

export class DigestMismatch extends Error {}

const requireHere = createRequire(import.meta.url)

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
    return storeVerified(requireHere, this.storeInput(digest, size, maxBytes), source, onBytes).catch(
      (err: Error & { kind?: string }) => {
        throw err.kind === 'digest' ? new DigestMismatch(err.message) : err
      },
    )
  }

  /** Where and under which bounds a blob is stored: what storeVerified (here or in the download worker) is given. */
  storeInput(digest: string, size: number | null, maxBytes: number): StoreInput {
    return { dir: this.root, final: this.path(digest), digest, size, limit: maxBytes, pid: process.pid }
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
