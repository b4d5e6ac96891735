/**
 * Applies image layers to a root filesystem directory, in a worker thread (extract.ts starts
 * it from this function's source, so it works the same from TypeScript and from the bundle:
 * the function must stay self-contained, taking everything through `req` and `input`).
 *
 * Nothing a layer says can reach outside the rootfs:
 * - every entry's parent directory is resolved inside the rootfs, symlinks followed as if the
 *   rootfs were `/` (an absolute or `..` target never climbs above it, as in the image itself);
 * - the last component is never followed: an existing entry is removed and the new one is
 *   created with O_EXCL|O_NOFOLLOW (a symlink planted by an earlier layer is replaced, not
 *   written through), and whiteouts delete the link, never its target;
 * - hard links point at an entry resolved the same way, never at a directory;
 * - device nodes, FIFOs and xattrs are dropped and counted; no setuid or setgid bit is kept
 *   (a set-id file on the host, owned by a sandbox root's host uid, would run as that uid for
 *   any local user).
 * Nothing a layer says can fill the host: runs of zeros are written as holes; the uncompressed
 * streams are bounded (the caller's bound or half the cache's free space) and refused once they
 * expand more than a ratio of what was read, long before they are all written; entries are
 * counted and bounded, and what is kept per entry is a few numbers (no object per file).
 * Each layer's uncompressed bytes are hashed on the way and must equal its diff_id.
 *
 * Layers are asked for one at a time (`nextLayer`), so a pull extracts layer N while layer
 * N+1 downloads. Each regular file's sha256 is taken as it is written, so the tree summary
 * after the unpack need not read the tree back.
 */
import type { FileHashes, fileHashTable } from './file-hashes.js'
import type { describe } from '../../options.js'
import type { isAllZero } from '../../sparse.js'
export interface ExtractLayer {
  file: string
  diffId: string
  compression: 'gzip' | 'zstd' | 'none'
}

export interface ExtractInput {
  rootfs: string
  /** How many layers nextLayer will hand out, in order. */
  count: number
  tarStreamPath: string
  asRoot: boolean
  /** On a root host: image id n is written as base + n (clamped below base + count), the sandbox's id range. */
  idShift: { base: number; count: number } | null
  /** Bytes the layers' uncompressed streams may add up to: the caller's bound, or half the free space if that is lower. */
  maxBytes: number
  /** Set when maxBytes is half the free space of the cache's filesystem: those free bytes (passing it may pass later). */
  freeBytes: number | null
  maxEntries: number
  /** A bomb: the streams, once past `afterBytes`, may be at most `ratio` times the compressed bytes read. */
  expansion: { ratio: number; afterBytes: number }
}

/** The functions the worker runs from their source beside this one (it can import nothing). */
export interface ExtractTools {
  fileHashTable: typeof fileHashTable
  isAllZero: typeof isAllZero
  describe: typeof describe
}

export interface ExtractResult {
  entries: number
  bytes: number
  droppedDevices: number
  droppedXattrs: number
  droppedOther: number
  /** The sha256 of each non-empty regular file written, by inode: the tree summary's payload without a read. */
  fileHashes: FileHashes
}

export async function extractLayersInWorker(
  req: (id: string) => any,
  input: ExtractInput,
  post: (msg: unknown) => void,
  nextLayer: (index: number) => Promise<ExtractLayer>,
  tools: ExtractTools,
): Promise<ExtractResult> {
  const fs = req('node:fs')
  const path = req('node:path')
  const zlib = req('node:zlib')
  const crypto = req('node:crypto')
  const childProcess = req('node:child_process')
  const tarStream = req(input.tarStreamPath)
  const { constants } = fs
  const root: string = input.rootfs
  // This thread (nice 10) yields the CPU to the host's event loop, which downloads the next layer meanwhile.
  try {
    req('node:os').setPriority(Number(String(fs.readlinkSync('/proc/thread-self')).split('/').pop()), 10)
  } catch {}
  const { describe, isAllZero } = tools
  const result: ExtractResult = {
    entries: 0,
    bytes: 0,
    droppedDevices: 0,
    droppedXattrs: 0,
    droppedOther: 0,
    fileHashes: tools.fileHashTable(),
  }
  // Of every layer so far: the compressed bytes read and the uncompressed bytes they gave.
  let compressedBytes = 0
  let streamedBytes = 0

  const fail = (message: string): never => {
    throw new Error(message)
  }

  /** Why the streams so far are refused, or null: past the bound, or expanding like a bomb. */
  const streamProblem = (): Error | null => {
    if (streamedBytes > input.maxBytes)
      return input.freeBytes === null
        ? new Error(`the image unpacks to more than ${input.maxBytes} bytes`)
        : Object.assign(
            new Error(
              `the image unpacks to more than ${input.maxBytes} bytes, half of the ${input.freeBytes} bytes free on the image cache's filesystem`,
            ),
            { code: 'ENOSPC' },
          )
    const { ratio, afterBytes } = input.expansion
    if (streamedBytes > afterBytes && streamedBytes > ratio * compressedBytes)
      return new Error(
        `the image's layers expand to ${streamedBytes} bytes from ${compressedBytes} compressed bytes, more than ${ratio} times (a decompression bomb)`,
      )
    return null
  }

  /** Writes chunk at offset `at` of fd, leaving its all-zero 64 KiB pieces as holes. */
  const writeKeepingHoles = (fd: number, chunk: Buffer, at: number): void => {
    const PIECE = 64 * 1024
    const write = (from: number, to: number) => {
      for (let off = from; off < to;) off += fs.writeSync(fd, chunk, off, to - off, at + off)
    }
    let run = -1
    for (let off = 0; off < chunk.length; off += PIECE) {
      const zero = isAllZero(chunk.subarray(off, Math.min(off + PIECE, chunk.length)))
      if (zero && run !== -1) write(run, off)
      if (zero) run = -1
      else if (run === -1) run = off
    }
    if (run !== -1) write(run, chunk.length)
  }

  const components = (name: string): string[] => {
    const parts = String(name)
      .split('/')
      .filter((c) => c !== '' && c !== '.')
    if (parts.some((c) => c === '..')) fail(`layer entry ${describe(name)} climbs with ..`)
    return parts
  }

  const lstat = (p: string) => {
    try {
      return fs.lstatSync(p)
    } catch {
      return null
    }
  }

  /**
   * Directories already resolved, by their path in the layer. Cleared whenever a symlink or a
   * directory is created over or removed, so a cached answer is always what a walk would give,
   * and when it holds many (a layer of a million directories must not keep a million paths).
   */
  const resolvedDirs = new Map<string, string>()

  /** Host path of the directory holding `parts`' last component, symlinks resolved inside root. */
  const resolveDir = (parts: string[], create: boolean): string => {
    const key = parts.join('/')
    const cached = resolvedDirs.get(key)
    if (cached !== undefined) return cached
    const found = walkDir(parts, create)
    if (resolvedDirs.size >= 4096) resolvedDirs.clear()
    resolvedDirs.set(key, found)
    return found
  }

  /** A parent the layer does not list: root's, 0755, as tar would make it. */
  const makeImplicitDir = (p: string): void => {
    fs.mkdirSync(p, { mode: 0o755 })
    chown(p, {})
  }

  const walkDir = (parts: string[], create: boolean): string => {
    const pending = parts.slice()
    const resolved: string[] = []
    let hops = 0
    while (pending.length > 0) {
      const part = pending.shift() as string
      if (part === '..') {
        resolved.pop()
        continue
      }
      const candidate = path.join(root, ...resolved, part)
      const st = lstat(candidate)
      if (st === null) {
        if (!create) fail(`missing directory /${[...resolved, part].join('/')}`)
        makeImplicitDir(candidate)
        resolved.push(part)
        continue
      }
      if (st.isSymbolicLink()) {
        if (++hops > 40) fail(`too many symbolic links under /${parts.join('/')}`)
        const target: string = fs.readlinkSync(candidate)
        if (target.startsWith('/')) resolved.length = 0
        pending.unshift(...target.split('/').filter((c: string) => c !== '' && c !== '.'))
        continue
      }
      if (!st.isDirectory()) {
        if (!create) fail(`/${[...resolved, part].join('/')} is not a directory`)
        // A file where a layer puts a directory: the layer wins, as in a union mount.
        fs.rmSync(candidate, { force: true })
        resolvedDirs.clear()
        makeImplicitDir(candidate)
      }
      resolved.push(part)
    }
    return path.join(root, ...resolved)
  }

  /** Removes whatever is at `p` (a link is removed, never followed). */
  const removeEntry = (p: string): void => {
    const st = lstat(p)
    if (st === null) return
    if (st.isDirectory() || st.isSymbolicLink()) resolvedDirs.clear()
    if (st.isDirectory()) fs.rmSync(p, { recursive: true, force: true })
    else fs.unlinkSync(p)
  }

  const hostId = (id: unknown): number => {
    const n = typeof id === 'number' && Number.isSafeInteger(id) && id >= 0 ? id : 0
    return input.idShift === null ? n : input.idShift.base + Math.min(n, input.idShift.count - 1)
  }
  const chown = (p: string, header: any): void => {
    if (input.asRoot) fs.lchownSync(p, hostId(header.uid), hostId(header.gid))
  }

  /** A mode as stored on the host: no setuid or setgid bit (the sticky bit stays: /tmp). */
  const hostMode = (mode: unknown, fallback: number): number => (typeof mode === 'number' ? mode : fallback) & 0o1777

  const applyLayer = async (layer: ExtractLayer, index: number): Promise<void> => {
    const hash = crypto.createHash('sha256')
    // What this layer wrote, for its opaque whiteouts: inodes (a number an entry), and hard links
    // to a lower layer's file by path (they share its inode, and only the link is this layer's).
    const writtenInodes = new Set<number>()
    const linkedPaths = new Set<string>()
    // Directory modes that would stop this process filling them (no root to override them): set after the layer.
    const deferredModes: Array<[string, number]> = []
    let source: any
    let child: any = null
    // Large reads and inflate chunks: fewer hops between this thread and the pool, fewer writes.
    const fileStream = fs.createReadStream(layer.file, { highWaterMark: 1024 * 1024 })
    if (layer.compression === 'gzip') source = fileStream.pipe(zlib.createGunzip({ chunkSize: 256 * 1024 }))
    else if (layer.compression === 'zstd') {
      child = childProcess.spawn('zstd', ['-dc', '--no-progress'], { stdio: ['pipe', 'pipe', 'pipe'] })
      fileStream.pipe(child.stdin)
      child.stdin.on('error', () => undefined)
      child.stderr.resume()
      source = child.stdout
    } else source = fileStream
    fileStream.on('error', (err: Error) => source.destroy(err))
    fileStream.on('data', (chunk: Buffer) => {
      compressedBytes += chunk.length
    })
    const extract = tarStream.extract()
    let reported = 0
    source.on('data', (chunk: Buffer) => {
      hash.update(chunk)
      reported += chunk.length
      streamedBytes += chunk.length
      // Checked on the stream, before its entries are written: a bomb stops here.
      const problem = streamProblem()
      if (problem !== null) source.destroy(problem)
    })
    source.on('error', (err: Error) => extract.destroy(err))
    source.pipe(extract)

    try {
      for await (const entry of extract) await applyEntry(entry, writtenInodes, linkedPaths, deferredModes)
    } catch (err) {
      // Nothing goes on decompressing a layer that failed.
      fileStream.destroy()
      source.destroy()
      child?.kill('SIGKILL')
      throw err
    }
    if (child !== null) {
      const code: number = await new Promise((resolve) =>
        child.exitCode !== null ? resolve(child.exitCode) : child.on('close', resolve),
      )
      if (code !== 0) fail(`zstd could not decompress layer ${index + 1}`)
    }
    // Tar archives may carry zero padding after their end: it is part of the hashed stream (and bounded with it).
    await new Promise<void>((resolve, reject) => {
      if (source.readableEnded) return resolve()
      source.on('end', resolve)
      source.on('error', reject)
      source.resume()
    })
    // chmod follows links: only what is still a directory (a later entry may have replaced it).
    for (const [p, mode] of deferredModes.reverse()) if (lstat(p)?.isDirectory()) fs.chmodSync(p, mode)
    const actual = `sha256:${hash.digest('hex')}`
    if (actual !== layer.diffId) fail(`layer ${index + 1} does not match its diff_id ${layer.diffId} (got ${actual})`)
    post({ type: 'layer', index, bytes: reported })
  }

  const applyEntry = async (
    entry: any,
    writtenInodes: Set<number>,
    linkedPaths: Set<string>,
    deferredModes: Array<[string, number]>,
  ): Promise<void> => {
    const header = entry.header
    result.entries += 1
    if (result.entries > input.maxEntries) fail(`the image has more than ${input.maxEntries} entries`)
    if (
      header.pax &&
      Object.keys(header.pax).some((k: string) => k.startsWith('SCHILY.xattr.') || k.startsWith('LIBARCHIVE.xattr.'))
    )
      result.droppedXattrs += 1
    const parts = components(header.name)
    const type: string = header.type
    if (parts.length === 0) {
      // The root itself: keep the rootfs' own owner and mode sane.
      entry.resume()
      return
    }
    const base = parts[parts.length - 1]
    const dir = resolveDir(parts.slice(0, -1), true)
    const target = path.join(dir, base)
    if (base === '.wh..wh..opq') {
      for (const name of fs.readdirSync(dir)) {
        const p = path.join(dir, name)
        const st = lstat(p)
        if (st !== null && !writtenInodes.has(st.ino) && !linkedPaths.has(p)) removeEntry(p)
      }
      entry.resume()
      return
    }
    if (base.startsWith('.wh.')) {
      const hidden = base.slice(4)
      if (hidden === '' || hidden === '.' || hidden === '..') fail(`bad whiteout ${describe(header.name)}`)
      removeEntry(path.join(dir, hidden))
      entry.resume()
      return
    }
    if (type === 'directory') {
      let st = lstat(target)
      if (st === null || !st.isDirectory()) {
        removeEntry(target)
        fs.mkdirSync(target, { mode: 0o700 })
        st = fs.lstatSync(target)
      }
      writtenInodes.add(st.ino)
      chown(target, header)
      const mode = hostMode(header.mode, 0o755)
      // Without root, a directory this process may not write to is made so once the layer is done.
      if (input.asRoot || (mode & 0o700) === 0o700) fs.chmodSync(target, mode)
      else deferredModes.push([target, mode])
      entry.resume()
    } else if (type === 'file' || type === 'contiguous-file') {
      removeEntry(target)
      const fd = fs.openSync(
        target,
        constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
        0o600,
      )
      try {
        const fileHash = crypto.createHash('sha256')
        let size = 0
        for await (const chunk of entry) {
          writeKeepingHoles(fd, chunk, size)
          fileHash.update(chunk)
          size += chunk.length
        }
        result.bytes += size
        // The length, past a last run of zeros left as a hole.
        if (size > 0) fs.ftruncateSync(fd, size)
        const { ino } = fs.fstatSync(fd)
        writtenInodes.add(ino)
        // An empty file's hash is known to the summary without one kept here.
        if (size > 0) result.fileHashes.add(ino, size, fileHash.digest())
        // Through the fd just created: no second lookup of the path. Owner first: chown clears setuid bits.
        if (input.asRoot) fs.fchownSync(fd, hostId(header.uid), hostId(header.gid))
        fs.fchmodSync(fd, hostMode(header.mode, 0o644))
      } finally {
        fs.closeSync(fd)
      }
    } else if (type === 'symlink') {
      removeEntry(target)
      fs.symlinkSync(String(header.linkname ?? ''), target)
      resolvedDirs.clear()
      chown(target, header)
      writtenInodes.add(fs.lstatSync(target).ino)
      entry.resume()
    } else if (type === 'link') {
      const linkParts = components(header.linkname ?? '')
      if (linkParts.length === 0) fail(`hard link ${describe(header.name)} has no target`)
      const from = path.join(resolveDir(linkParts.slice(0, -1), false), linkParts[linkParts.length - 1])
      const st = lstat(from)
      if (st === null) fail(`hard link ${describe(header.name)} points at missing ${describe(header.linkname)}`)
      if (st.isDirectory()) fail(`hard link ${describe(header.name)} points at a directory`)
      if (from !== target) {
        removeEntry(target)
        fs.linkSync(from, target)
      }
      if (!writtenInodes.has(st.ino)) linkedPaths.add(target)
      entry.resume()
    } else if (type === 'character-device' || type === 'block-device') {
      result.droppedDevices += 1
      entry.resume()
    } else {
      // FIFOs and anything tar-stream does not know: not needed to run an image.
      result.droppedOther += 1
      entry.resume()
    }
  }

  for (let i = 0; i < input.count; i += 1) await applyLayer(await nextLayer(i), i)
  return result
}

export interface TreeSummaryResult {
  digest: string
  sizeBytes: number
  fileCount: number
}

/**
 * digest.ts's summarizeTree, in a worker: the same walk and the same bytes hashed, so a tree
 * summarized here verifies there (images.verify). Self-contained for the same reason as above.
 */
export function summarizeTreeInWorker(
  req: (id: string) => any,
  input: { root: string; known?: FileHashes },
): TreeSummaryResult {
  const root = input.root
  // Files the extractor wrote and hashed, by inode, used when the size still matches.
  const known = input.known
  const fs = req('node:fs')
  const path = req('node:path')
  const crypto = req('node:crypto')
  const EMPTY = crypto.createHash('sha256').digest('hex')
  const tree = crypto.createHash('sha256')
  const buffer = Buffer.allocUnsafe(1024 * 1024)
  let sizeBytes = 0
  let fileCount = 0
  const hashFile = (file: string): string => {
    const hash = crypto.createHash('sha256')
    const fd = fs.openSync(file, 'r')
    try {
      for (
        let n = fs.readSync(fd, buffer, 0, buffer.length, null);
        n > 0;
        n = fs.readSync(fd, buffer, 0, buffer.length, null)
      )
        hash.update(buffer.subarray(0, n))
    } finally {
      fs.closeSync(fd)
    }
    return hash.digest('hex')
  }
  const letter = (st: any): string =>
    st.isFile()
      ? 'f'
      : st.isDirectory()
        ? 'd'
        : st.isSymbolicLink()
          ? 'l'
          : st.isFIFO()
            ? 'p'
            : st.isSocket()
              ? 's'
              : st.isCharacterDevice()
                ? 'c'
                : 'b'
  const visit = (abs: string, rel: string, st: any): void => {
    const type = letter(st)
    let payload = ''
    if (type === 'f') {
      // An empty file needs no read: its hash is the empty string's.
      const seen = st.size === 0 ? EMPTY : (known?.find(st.ino, st.size) ?? null)
      payload = `${st.size} ${seen ?? hashFile(abs)}`
      sizeBytes += st.size
      fileCount += 1
    } else if (type === 'l') payload = fs.readlinkSync(abs)
    else if (type === 'c' || type === 'b') payload = String(st.rdev)
    tree.update(`${type} ${(st.mode & 0o7777).toString(8)} ${rel}\0${payload}\0`)
    if (type !== 'd') return
    for (const name of (fs.readdirSync(abs) as string[]).sort()) {
      const child = path.join(abs, name)
      visit(child, rel === '' ? name : `${rel}/${name}`, fs.lstatSync(child))
    }
  }
  visit(root, '', fs.lstatSync(root))
  return { digest: `sha256:${tree.digest('hex')}`, sizeBytes, fileCount }
}
