/**
 * A digest of a directory tree that depends only on what a sandbox can observe as content:
 * relative paths, entry types, permission bits, symlink targets and file bytes. Owners and
 * times are left out, so root and rootless builds of the same packages digest alike.
 */
import { createHash } from 'node:crypto'
import { createReadStream } from 'node:fs'
import fs from 'node:fs/promises'
import path from 'node:path'

export interface TreeSummary {
  digest: string
  sizeBytes: number
  fileCount: number
}

const SMALL_FILE = 4 * 1024 * 1024
const PARALLEL_READS = 16

async function hashFile(file: string, size: number): Promise<string> {
  if (size <= SMALL_FILE)
    return createHash('sha256')
      .update(await fs.readFile(file))
      .digest('hex')
  const hash = createHash('sha256')
  for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer)
  return hash.digest('hex')
}

function typeLetter(stat: import('node:fs').Stats): string {
  if (stat.isFile()) return 'f'
  if (stat.isDirectory()) return 'd'
  if (stat.isSymbolicLink()) return 'l'
  if (stat.isFIFO()) return 'p'
  if (stat.isSocket()) return 's'
  if (stat.isCharacterDevice()) return 'c'
  return 'b'
}

/** Digest of `root` (a directory or a single file). */
export async function summarizeTree(root: string): Promise<TreeSummary> {
  const tree = createHash('sha256')
  let sizeBytes = 0
  let fileCount = 0

  const visit = async (abs: string, rel: string, stat: import('node:fs').Stats): Promise<void> => {
    const type = typeLetter(stat)
    let payload = ''
    if (type === 'f') {
      payload = `${stat.size} ${await hashFile(abs, stat.size)}`
      sizeBytes += stat.size
      fileCount += 1
    } else if (type === 'l') {
      payload = await fs.readlink(abs)
    } else if (type === 'c' || type === 'b') {
      payload = String(stat.rdev)
    }
    tree.update(`${type} ${(stat.mode & 0o7777).toString(8)} ${rel}\0${payload}\0`)
    if (type !== 'd') return
    const names = (await fs.readdir(abs)).sort()
    // Stat and hash children in parallel batches, then feed them in sorted order.
    for (let i = 0; i < names.length; i += PARALLEL_READS) {
      const batch = names.slice(i, i + PARALLEL_READS)
      const stats = await Promise.all(batch.map((n) => fs.lstat(path.join(abs, n))))
      const fileHashes = await Promise.all(
        batch.map((n, j) => (stats[j].isFile() ? hashFile(path.join(abs, n), stats[j].size) : Promise.resolve(''))),
      )
      for (let j = 0; j < batch.length; j += 1) {
        const childRel = rel === '' ? batch[j] : `${rel}/${batch[j]}`
        if (stats[j].isFile()) {
          tree.update(`f ${(stats[j].mode & 0o7777).toString(8)} ${childRel}\0${stats[j].size} ${fileHashes[j]}\0`)
          sizeBytes += stats[j].size
          fileCount += 1
        } else {
          await visit(path.join(abs, batch[j]), childRel, stats[j])
        }
      }
    }
  }

  await visit(root, '', await fs.lstat(root))
  return { digest: `sha256:${tree.digest('hex')}`, sizeBytes, fileCount }
}
