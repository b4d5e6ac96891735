/**
 * One image layer from a directory krunbox keeps (a published image's tree, a snapshot's
 * root/): a tar of its entries with the deletions of a snapshot as OCI whiteouts (`.wh.<name>`)
 * and opaque directories (`.wh..wh..opq`), gzip-compressed into a file while both digests are
 * taken (the blob's, and the tar's: its diff_id). Streams: memory holds one directory handle per
 * level, the hard links seen, and the chunks in flight, whatever the tree holds (a million files,
 * a file of 16 GiB).
 *
 * The tree is read, never followed: every entry is lstat'ed, a symlink is written as a symlink
 * (its target, never its content), a file is opened with O_NOFOLLOW and must still be the entry
 * that was lstat'ed. Owners are written as the sandbox saw them (sandbox-ids.ts); setuid and
 * setgid bits never reach a layer (the trees have none: snapshots drop them, images are
 * published without them; this holds it whatever a tree holds).
 */
import { createHash, type Hash } from 'node:crypto'
import fs from 'node:fs'
import fsp from 'node:fs/promises'
import path from 'node:path'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import zlib from 'node:zlib'
import { describe } from '../../options.js'
import type { SandboxIds } from './sandbox-ids.js'
import { TAR_END, encodeHeader, padding, type TarHeader } from './tar-header.js'

export const LAYER_GZIP = 'application/vnd.oci.image.layer.v1.tar+gzip'
export const WHITEOUT_PREFIX = '.wh.'
export const OPAQUE_MARKER = '.wh..wh..opq'

export interface LayerTree {
  /** The directory whose entries (not itself) are the layer. */
  root: string
  /** Deleted paths, from the layer's root (`/etc/motd`), as a snapshot's markers.json keeps them. */
  whiteouts?: readonly string[]
  /** Directories that hide everything below them in the layers underneath. */
  opaque?: readonly string[]
}

/** A layer as an image lists it. */
export interface LayerBlob {
  digest: string
  size: number
  diffId: string
  mediaType: string
}

/** A tree that cannot become a layer (a name OCI reserves, a marker outside the tree, a file that changed). */
export class LayerTreeError extends Error {}

const READ_CHUNK = 1024 * 1024
/** Files up to this size are read in one synchronous read: a thread pool round trip per small file is most of a walk's time. */
const SMALL_FILE = 64 * 1024
/** Headers and small files are sent on in batches of about this much. */
const BATCH_BYTES = 256 * 1024

/** Writes the layer of `tree` to `file` (created, never replaced); the caller removes it on failure. */
export async function writeLayer(tree: LayerTree, file: string, ids: SandboxIds): Promise<LayerBlob> {
  const diffId = createHash('sha256')
  const blob = createHash('sha256')
  let size = 0
  await pipeline(
    Readable.from(tarOf(tree, ids), { objectMode: false, highWaterMark: 4 * READ_CHUNK }),
    hashing(diffId),
    zlib.createGzip({ chunkSize: 256 * 1024 }),
    hashing(blob, (n) => (size += n)),
    fs.createWriteStream(file, { flags: 'wx', mode: 0o644 }),
  )
  return {
    digest: `sha256:${blob.digest('hex')}`,
    size,
    diffId: `sha256:${diffId.digest('hex')}`,
    mediaType: LAYER_GZIP,
  }
}

function hashing(hash: Hash, count?: (n: number) => void) {
  return async function* (source: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
    for await (const chunk of source) {
      hash.update(chunk)
      count?.(chunk.length)
      yield chunk
    }
  }
}

/** The tar's bytes, small pieces gathered into batches. */
async function* tarOf(tree: LayerTree, ids: SandboxIds): AsyncGenerator<Buffer> {
  let pieces: Buffer[] = []
  let bytes = 0
  for await (const piece of entriesOf(tree, ids)) {
    pieces.push(piece)
    bytes += piece.length
    if (bytes >= BATCH_BYTES) {
      yield pieces.length === 1 ? pieces[0]! : Buffer.concat(pieces, bytes)
      pieces = []
      bytes = 0
    }
  }
  pieces.push(TAR_END)
  yield Buffer.concat(pieces)
}

/** A marker's path as components, refused if it could name anything outside the layer. */
function markerParts(marker: string): string[] {
  const parts = marker.split('/').filter((p) => p !== '')
  if (parts.length === 0 || parts.some((p) => p === '.' || p === '..'))
    throw new LayerTreeError(`the deletion marker ${describe(marker)} does not name an entry of the layer`)
  return parts
}

async function* entriesOf(tree: LayerTree, ids: SandboxIds): AsyncGenerator<Buffer> {
  // Deletions by the directory that holds them; each is written right after that directory's
  // own entry, before anything the layer puts there.
  const whiteouts = new Map<string, string[]>()
  for (const w of tree.whiteouts ?? []) {
    const parts = markerParts(w)
    const dir = parts.slice(0, -1).join('/')
    whiteouts.set(dir, [...(whiteouts.get(dir) ?? []), parts.at(-1)!])
  }
  const opaque = new Set((tree.opaque ?? []).map((o) => markerParts(o).join('/')))
  let markersLeft = whiteouts.size + opaque.size
  const markersOf = (dir: string): Buffer[] => {
    const out: Buffer[] = []
    if (opaque.delete(dir)) {
      markersLeft -= 1
      out.push(marker(dir, OPAQUE_MARKER))
    }
    const names = whiteouts.get(dir)
    if (names !== undefined) {
      whiteouts.delete(dir)
      markersLeft -= 1
      for (const name of names) out.push(marker(dir, `${WHITEOUT_PREFIX}${name}`))
    }
    return out
  }
  // A file with other names in the tree is written once; its other names are hard links to it.
  const linked = new Map<string, string>()

  async function* walk(dir: string, abs: string): AsyncGenerator<Buffer> {
    const handle = await fsp.opendir(abs, { bufferSize: 1024 })
    for await (const dirent of handle) {
      const rel = dir === '' ? dirent.name : `${dir}/${dirent.name}`
      if (dirent.name.startsWith(WHITEOUT_PREFIX))
        throw new LayerTreeError(
          `${describe(`/${rel}`)} has a name OCI layers reserve for deletions (${WHITEOUT_PREFIX}…): rename it before the export`,
        )
      const file = path.join(abs, dirent.name)
      // Synchronous: an entry's lstat is microseconds, and the walk yields every batch (BATCH_BYTES).
      const st = fs.lstatSync(file)
      const base = {
        name: rel,
        mode: st.mode & 0o1777,
        uid: ids.uid(st.uid),
        gid: ids.gid(st.gid),
        size: 0,
        mtime: st.mtimeMs / 1000,
      }
      if (st.isDirectory()) {
        yield encodeHeader({ ...base, kind: 'directory' })
        yield* markersOf(rel)
        yield* walk(rel, file)
      } else if (st.isSymbolicLink()) {
        yield encodeHeader({ ...base, kind: 'symlink', linkname: fs.readlinkSync(file) })
      } else if (st.isFile()) {
        const key = `${st.dev}:${st.ino}`
        const first = st.nlink > 1 ? linked.get(key) : undefined
        if (first !== undefined) {
          yield encodeHeader({ ...base, kind: 'hardlink', linkname: first })
          continue
        }
        if (st.nlink > 1) linked.set(key, rel)
        const header: TarHeader = { ...base, kind: 'file', size: st.size }
        yield encodeHeader(header)
        if (st.size > SMALL_FILE) yield* content(file, st)
        else if (st.size > 0) yield smallContent(file, st)
        yield padding(st.size)
      }
      // Sockets, FIFOs and devices: the trees keep none, and a layer gets none.
    }
  }

  yield* markersOf('')
  yield* walk('', tree.root)
  if (markersLeft > 0) {
    const left = [...opaque, ...whiteouts.keys()].map((d) => `/${d}`)
    throw new LayerTreeError(
      `deletion markers name directories that are not in the layer: ${describe(left.join(', '))}`,
    )
  }
}

function marker(dir: string, name: string): Buffer {
  return encodeHeader({
    name: dir === '' ? name : `${dir}/${name}`,
    kind: 'file',
    mode: 0o644,
    uid: 0,
    gid: 0,
    size: 0,
    mtime: 0,
  })
}

const OPEN_FLAGS = fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK

/** The file lstat'ed as st, if it is still that file (it was not replaced meanwhile). */
function sameFile(file: string, st: fs.Stats, now: fs.Stats): void {
  if (!now.isFile() || now.ino !== st.ino || now.dev !== st.dev)
    throw new LayerTreeError(`${describe(file)} was replaced while it was exported`)
}

/** A small file's st.size bytes in one read. */
function smallContent(file: string, st: fs.Stats): Buffer {
  const fd = fs.openSync(file, OPEN_FLAGS)
  try {
    sameFile(file, st, fs.fstatSync(fd))
    const buffer = Buffer.allocUnsafe(st.size)
    let at = 0
    while (at < st.size) {
      const n = fs.readSync(fd, buffer, at, st.size - at, at)
      if (n === 0) throw new LayerTreeError(`${describe(file)} shrank while it was exported`)
      at += n
    }
    return buffer
  } finally {
    fs.closeSync(fd)
  }
}

/** Exactly st.size bytes of the file lstat'ed as st, read through a descriptor that never followed a link. */
async function* content(file: string, st: fs.Stats): AsyncGenerator<Buffer> {
  const handle = await fsp.open(file, OPEN_FLAGS)
  try {
    sameFile(file, st, await handle.stat())
    let at = 0
    while (at < st.size) {
      const want = Math.min(READ_CHUNK, st.size - at)
      const buffer = Buffer.allocUnsafe(want)
      const { bytesRead } = await handle.read(buffer, 0, want, at)
      if (bytesRead === 0) throw new LayerTreeError(`${describe(file)} shrank while it was exported`)
      at += bytesRead
      yield bytesRead === want ? buffer : buffer.subarray(0, bytesRead)
    }
  } finally {
    await handle.close()
  }
}
