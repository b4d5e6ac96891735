/**
 * The sha256 of each regular file the extractor wrote, by inode, so that the tree summary after
 * an unpack need not read the tree back. Kept in typed arrays (52 bytes a file, no object per
 * file: a string and a map entry per file cost a layer of 300 000 files ~200 MiB of the host's
 * memory). Self-contained: the extractor's worker runs it from its source (extract.ts).
 */
export interface FileHashes {
  add(ino: number, size: number, digest: Buffer): void
  /** The hex sha256 of the file last written under this inode, if it still has `size` bytes. */
  find(ino: number, size: number): string | null
}

export function fileHashTable(): FileHashes {
  let count = 0
  let inos = new Float64Array(1024)
  let sizes = new Float64Array(1024)
  let digests = Buffer.alloc(1024 * 32)
  // Positions by inode, the latest write of an inode first (a removed file's inode may be reused); built on the first find.
  let byIno: Uint32Array | null = null
  return {
    add(ino, size, digest) {
      if (count === inos.length) {
        const grown = (a: Float64Array) => {
          const b = new Float64Array(a.length * 2)
          b.set(a)
          return b
        }
        inos = grown(inos)
        sizes = grown(sizes)
        const d = Buffer.alloc(digests.length * 2)
        digests.copy(d)
        digests = d
      }
      inos[count] = ino
      sizes[count] = size
      digest.copy(digests, count * 32, 0, 32)
      count += 1
      byIno = null
    },
    find(ino, size) {
      byIno ??= Uint32Array.from({ length: count }, (_, i) => i).sort((a, b) => inos[a] - inos[b] || b - a)
      let lo = 0
      let hi = byIno.length
      while (lo < hi) {
        const mid = (lo + hi) >>> 1
        if (inos[byIno[mid]] < ino) lo = mid + 1
        else hi = mid
      }
      if (lo === byIno.length || inos[byIno[lo]] !== ino || sizes[byIno[lo]] !== size) return null
      return digests.toString('hex', byIno[lo] * 32, byIno[lo] * 32 + 32)
    },
  }
}
