/**
 * Reading a tar stream that comes from inside a sandbox (a directory download, a snapshot's
 * layer): the checks every such stream gets, whoever writes it out. Each entry reaches the sink
 * with its name as clean components below the destination (an absolute name, `..` or a NUL is
 * refused), a symlink with a target that is not empty and has no NUL, a hardlink with its target
 * as clean components too, and a file only once its announced size (holes included) fits under
 * the cap with every file before it. Devices (but an overlay whiteout), FIFOs and anything else
 * arrive as 'other'. Where the bytes go, and what a destination may already hold, is the
 * sink's: lib/tar.ts's download writes through held directory fds, snapshots.ts's LayerWriter
 * only inside directories it made.
 *
 * Two readers of tar stay apart. The OCI extractor (images/oci/extract-worker.ts) runs from its
 * own source text in a worker or a mapped child process, so it can import nothing, and a layer's
 * names mean something else: an absolute name is one below the rootfs, the symlinks on its way
 * resolve inside the rootfs as the image sees them, and `.wh.` files are deletions. exec's
 * collect (command-collect.ts) never unpacks: it repacks what it keeps, and drops, instead of
 * refusing, a name that would leave its match.
 */
import type { Readable } from 'node:stream'
import tar from 'tar-stream'
import type { SandboxError } from './errors.js'
import { describe } from './options.js'

/** An entry's place below the destination: its components ([] is the destination itself) and their join. */
export interface TarPath {
  parts: string[]
  path: string
}

export type TarEntry = TarPath & { name: string; header: tar.Header } & (
    | { kind: 'directory' }
    | { kind: 'file'; size: number; content: AsyncIterable<Buffer> }
    | { kind: 'symlink'; target: string }
    | { kind: 'hardlink'; target: TarPath }
    /** A character device 0:0: an overlay upper layer's deletion mark. */
    | { kind: 'whiteout' }
    | { kind: 'other' }
  )

export interface UntrustedTarLimits {
  /** Most bytes the files may add up to, at their announced sizes. */
  maxBytes: number
  /** The error for the file whose size would pass maxBytes (total: with it), before any of it is written. */
  overCap(total: number, entry: TarEntry & { kind: 'file' }): SandboxError
  /** The error for an entry refused by the checks above, from a message naming it. */
  refuse(message: string): SandboxError
  /** The extractor's buffer (tar-stream's default otherwise). */
  highWaterMark?: number
}

/**
 * Reads source to its end, handing each checked entry to the sink in order. A file's content
 * the sink leaves unread is skipped. On any error (the sink's or a check's) the source and the
 * extractor are destroyed and the error is thrown as it is. Resolves with the files' bytes and
 * the number of entries.
 */
export async function readUntrustedTar(
  source: Readable,
  sink: (entry: TarEntry) => Promise<void>,
  limits: UntrustedTarLimits,
): Promise<{ bytes: number; entries: number }> {
  const extract = tar.extract(limits.highWaterMark === undefined ? undefined : { highWaterMark: limits.highWaterMark })
  // Feed the (streamx) extractor by hand, with backpressure both ways.
  source.on('data', (chunk: Buffer) => {
    if (!extract.write(chunk)) source.pause()
  })
  extract.on('drain', () => source.resume())
  source.on('end', () => extract.end(undefined))
  source.on('error', (err) => extract.destroy(err))
  let bytes = 0
  let entries = 0
  try {
    for await (const stream of extract) {
      const entry = checkedEntry(stream.header, stream as unknown as AsyncIterable<Buffer>, limits)
      entries++
      if (entry.kind === 'file') {
        if (bytes + entry.size > limits.maxBytes) throw limits.overCap(bytes + entry.size, entry)
        bytes += entry.size
      }
      await sink(entry)
      stream.resume()
    }
  } catch (err) {
    source.destroy()
    extract.destroy()
    throw err
  }
  return { bytes, entries }
}

function checkedEntry(header: tar.Header, content: AsyncIterable<Buffer>, limits: UntrustedTarLimits): TarEntry {
  const common = { ...tarPath(header.name, limits), name: header.name, header }
  switch (header.type) {
    case 'directory':
      return { ...common, kind: 'directory' }
    case 'file':
    case 'contiguous-file':
      return { ...common, kind: 'file', size: header.size ?? 0, content }
    case 'symlink': {
      const target = header.linkname ?? ''
      if (target.length === 0 || target.includes('\0'))
        throw limits.refuse(`symlink entry ${describe(header.name)} has an invalid target`)
      return { ...common, kind: 'symlink', target }
    }
    case 'link':
      return { ...common, kind: 'hardlink', target: tarPath(header.linkname ?? '', limits) }
    case 'character-device':
      if ((header.devmajor ?? 0) === 0 && (header.devminor ?? 0) === 0) return { ...common, kind: 'whiteout' }
      return { ...common, kind: 'other' }
    default:
      return { ...common, kind: 'other' }
  }
}

/** A name as components below the destination; empty and `.` components dropped, absolute names and `..` refused. */
function tarPath(name: string, limits: UntrustedTarLimits): TarPath {
  if (typeof name !== 'string' || name.includes('\0'))
    throw limits.refuse(`tar entry name ${describe(name)} is invalid`)
  if (name.startsWith('/')) throw limits.refuse(`tar entry ${describe(name)} is an absolute path`)
  const parts = name.split('/').filter((p) => p !== '' && p !== '.')
  if (parts.includes('..')) throw limits.refuse(`tar entry ${describe(name)} leaves the destination`)
  return { parts, path: parts.join('/') }
}
