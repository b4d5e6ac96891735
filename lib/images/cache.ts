/**
 * The content-addressed image cache on disk (layout in layout.ts). Images appear by one
 * atomic rename of a finished temporary directory and disappear by a rename into a trash
 * directory, so a reader never sees a half-built or half-deleted image.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs/promises'
import path from 'node:path'
import { ownCacheRoot } from './cache-access.js'
import { CacheLayout, ID_PATTERN, TMP_PREFIX, TRASH_PREFIX } from './layout.js'
import { removeTreeMapped, unpackMapping } from './oci/userns.js'
import { isProcessAlive, selfIdentity } from './liveness.js'
import { sweepLockLeftovers } from './lock.js'
import { run } from './run.js'
import type { ImageManifest, NameRecord } from './types.js'
import { errors } from '../protocol/errors.gen.js'

/** Image names: lower case, digits, dot, dash, underscore; they become file names. */
export const NAME_PATTERN = /^[a-z0-9][a-z0-9._-]{0,63}$/

export function validateImageName(name: unknown): string {
  if (typeof name !== 'string' || !NAME_PATTERN.test(name)) {
    throw errors.badArgument({
      subject: `image name ${JSON.stringify(name)}`,
      problem: 'is invalid: use 1-64 of a-z 0-9 . _ - starting with a letter or digit',
    })
  }
  return name
}

async function writeFileAtomic(file: string, content: string): Promise<void> {
  const staging = `${path.dirname(file)}/.${path.basename(file)}.${process.pid}-${randomBytes(4).toString('hex')}`
  await fs.writeFile(staging, content)
  await fs.rename(staging, file)
}

export class ImageCache {
  readonly layout: CacheLayout
  #owned: Promise<void> | null = null

  constructor(root: string) {
    this.layout = new CacheLayout(root)
  }

  /** The cache made this user's alone (cache-access.ts), once: every entry point of the store awaits it first. */
  own(): Promise<void> {
    const owning = (this.#owned ??= ownCacheRoot(this.root))
    owning.catch(() => this.#owned === owning && (this.#owned = null))
    return owning
  }

  /** own() for an entry point that only reads: a cache that does not exist yet is not made. */
  async ownIfPresent(): Promise<void> {
    const present = this.#owned !== null || (await fs.stat(this.root).catch(() => null)) !== null
    if (present) await this.own()
  }

  get root(): string {
    return this.layout.root
  }

  /** A file's identity now (inode, mtime, size), or null: a file replaced by a rename or rewritten has another. */
  async stamp(file: string): Promise<string | null> {
    try {
      const st = await fs.stat(file, { bigint: true })
      return `${st.ino}:${st.mtimeNs}:${st.size}`
    } catch {
      return null
    }
  }

  /** The manifest of a complete image, or null (absent, or not an image of ours). */
  async readManifest(id: string): Promise<ImageManifest | null> {
    if (!ID_PATTERN.test(id)) return null
    try {
      const manifest = JSON.parse(await fs.readFile(this.layout.manifest(id), 'utf8')) as ImageManifest
      if (manifest.id !== id || typeof manifest.treeDigest !== 'string') return null
      const rootfs = await fs.stat(this.layout.rootfs(id))
      return rootfs.isDirectory() ? manifest : null
    } catch {
      return null
    }
  }

  async readName(name: string): Promise<NameRecord | null> {
    try {
      return JSON.parse(await fs.readFile(this.layout.nameRecord(name), 'utf8')) as NameRecord
    } catch {
      return null
    }
  }

  async writeName(record: NameRecord): Promise<void> {
    await fs.mkdir(this.layout.namesDir, { recursive: true })
    const current = await this.readName(record.name)
    // A no-op build must not touch anything.
    if (
      current !== null &&
      current.id === record.id &&
      current.kind === record.kind &&
      JSON.stringify(current.recipe) === JSON.stringify(record.recipe)
    )
      return
    await writeFileAtomic(this.layout.nameRecord(record.name), JSON.stringify(record, null, 2))
  }

  async removeName(name: string): Promise<void> {
    await fs.rm(this.layout.nameRecord(name), { force: true })
  }

  async listNames(): Promise<NameRecord[]> {
    const files = await fs.readdir(this.layout.namesDir).catch(() => [] as string[])
    const records: NameRecord[] = []
    for (const file of files.filter((f) => f.endsWith('.json') && !f.startsWith('.')).sort()) {
      const record = await this.readName(file.slice(0, -'.json'.length))
      if (record !== null) records.push(record)
    }
    return records
  }

  async listImageIds(): Promise<string[]> {
    const entries = await fs.readdir(this.root).catch(() => [] as string[])
    return entries.filter((e) => ID_PATTERN.test(e)).sort()
  }

  /** A fresh build directory whose name identifies its owner process (see sweep). */
  async createTmpDir(): Promise<string> {
    await this.own()
    const self = selfIdentity()
    const dir = path.join(this.root, `${TMP_PREFIX}${self.pid}-${self.start ?? 'x'}-${randomBytes(6).toString('hex')}`)
    // It becomes <id>/: closed to other users even in a cache whose root someone opened again.
    await fs.mkdir(dir, { mode: 0o700 })
    return dir
  }

  /**
   * Moves a finished build directory (rootfs/ + manifest.json) into place. Returns false when
   * the image already exists (another builder won); the caller's directory is then discarded.
   */
  async publish(tmpDir: string, id: string): Promise<boolean> {
    try {
      await fs.rename(tmpDir, this.layout.imageDir(id))
      return true
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw err
      await this.discard(tmpDir)
      return false
    }
  }

  async discard(dir: string): Promise<void> {
    const trash = path.join(this.root, `${TRASH_PREFIX}${randomBytes(6).toString('hex')}`)
    try {
      await fs.rename(dir, trash)
    } catch {
      return
    }
    await removeTree(trash)
  }

  /** Deletes an image: first out of sight (rename), then from disk. */
  async removeImage(id: string): Promise<boolean> {
    if (!ID_PATTERN.test(id)) return false
    const exists = await fs.lstat(this.layout.imageDir(id)).then(
      () => true,
      () => false,
    )
    if (!exists) return false
    await this.discard(this.layout.imageDir(id))
    return true
  }

  /** Removes build directories of dead builders, trash, and lock leftovers. */
  async sweep(): Promise<string[]> {
    const swept: string[] = []
    const entries = await fs.readdir(this.root).catch(() => [] as string[])
    for (const entry of entries) {
      let dead = false
      if (entry.startsWith(TRASH_PREFIX)) dead = true
      else if (entry.startsWith(TMP_PREFIX)) {
        const [pid, start] = entry.slice(TMP_PREFIX.length).split('-')
        dead = !isProcessAlive({ pid: Number(pid), start: start === 'x' ? null : start })
      }
      if (!dead) continue
      await removeTree(path.join(this.root, entry))
      swept.push(entry)
    }
    await sweepLockLeftovers(this.layout.locksDir)
    return swept
  }
}

/**
 * rm -rf that tolerates a tree still changing under it for a moment, and, without root,
 * directories whose mode forbids removing their entries (custom images may have them).
 */
export async function removeTree(dir: string): Promise<void> {
  for (let attempt = 0; ; attempt += 1) {
    try {
      await fs.rm(dir, { recursive: true, force: true, maxRetries: 3 })
      return
    } catch (err) {
      if (attempt >= 5) throw err
      const code = (err as NodeJS.ErrnoException).code
      // A rootless OCI unpack keeps owners as the user's subordinate ids: only their namespace can delete those.
      const mapping = code === 'EACCES' || code === 'EPERM' ? await unpackMapping() : null
      if (mapping !== null) return removeTreeMapped(mapping, dir)
      if (code === 'EACCES' || code === 'EPERM') await run('chmod', ['-R', 'u+rwx', dir])
      await new Promise((resolve) => setTimeout(resolve, 200))
    }
  }
}
