/**
 * Which image a pulled reference resolved to: `<cache>/refs/<sha256 of the canonical ref>.json`
 * holds { ref, manifestDigest, configDigest, id }. A pulled reference keeps its image, as a name does.
 */
import { createHash, randomBytes } from 'node:crypto'
import fs from 'node:fs/promises'
import path from 'node:path'

export interface RefRecord {
  ref: string
  /** Digest of the manifest (or index) the reference pointed to when pulled. */
  manifestDigest: string
  /** Its own config: images that share every layer share the rootfs `id`, not their Env, User or Cmd. */
  configDigest?: string
  id: string
  pulledAt: string
}

export class RefStore {
  readonly dir: string

  constructor(cacheRoot: string) {
    this.dir = path.join(cacheRoot, 'refs')
  }

  private file(ref: string): string {
    return path.join(this.dir, `${createHash('sha256').update(ref).digest('hex')}.json`)
  }

  async read(ref: string): Promise<RefRecord | null> {
    try {
      const record = JSON.parse(await fs.readFile(this.file(ref), 'utf8')) as RefRecord
      return record.ref === ref ? record : null
    } catch {
      return null
    }
  }

  async write(record: RefRecord): Promise<void> {
    await fs.mkdir(this.dir, { recursive: true })
    const current = await this.read(record.ref)
    if (
      current !== null &&
      current.id === record.id &&
      current.manifestDigest === record.manifestDigest &&
      current.configDigest === record.configDigest
    )
      return
    const staging = path.join(this.dir, `.${process.pid}-${randomBytes(4).toString('hex')}`)
    await fs.writeFile(staging, JSON.stringify(record, null, 2))
    await fs.rename(staging, this.file(record.ref))
  }

  async remove(ref: string): Promise<boolean> {
    const existed = (await this.read(ref)) !== null
    await fs.rm(this.file(ref), { force: true })
    return existed
  }

  async list(): Promise<RefRecord[]> {
    const files = await fs.readdir(this.dir).catch(() => [] as string[])
    const out: RefRecord[] = []
    for (const f of files.filter((n) => /^[0-9a-f]{64}\.json$/.test(n))) {
      try {
        out.push(JSON.parse(await fs.readFile(path.join(this.dir, f), 'utf8')) as RefRecord)
      } catch {
        // being replaced or foreign: skip
      }
    }
    return out.sort((a, b) => (a.ref < b.ref ? -1 : 1))
  }
}
