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
 * - device nodes, FIFOs and xattrs are dropped and counted; sizes and entry counts are bounded.
 * Each layer's uncompressed bytes are hashed on the way and must equal its diff_id.
 *
 * Layers are asked for one at a time (`nextLayer`), so a pull extracts layer N while layer
 * N+1 downloads. Each regular file's sha256 is taken as it is written, so the tree summary
 * after the unpack need not read the tree back.
 */
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
  maxBytes: number
  maxEntries: number
}

export interface ExtractResult {
  entries: number
  bytes: number
  droppedDevices: number
  droppedXattrs: number
  droppedOther: number
  /** "size hex" of each regular file written, by inode: the tree summary's payload without a read. */
  fileHashes: Array<[number, string]>
}

export async function extractLayersInWorker(
  req: (id: string) => any,
  input: ExtractInput,
  post: (msg: unknown) => void,
  nextLayer: (index: number) => Promise<ExtractLayer>,
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
  const result: ExtractResult = {
    entries: 0,
    bytes: 0,
    droppedDevices: 0,
    droppedXattrs: 0,
    droppedOther: 0,
    fileHashes: [],
  }
  const fileHashes = new Map<number, string>()

  const fail = (message: string): never => {
    throw new Error(message)
  }

  const components = (name: string): string[] => {
    const parts = String(name)
      .split('/')
      .filter((c) => c !== '' && c !== '.')
    if (parts.some((c) => c === '..')) fail(`layer entry ${JSON.stringify(name)} climbs with ..`)
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
   * directory is created over or removed, so a cached answer is always what a walk would give.
   */
  const resolvedDirs = new Map<string, string>()

  /** Host path of the directory holding `parts`' last component, symlinks resolved inside root. */
  const resolveDir = (parts: string[], create: boolean): string => {
    const key = parts.join('/')
    const cached = resolvedDirs.get(key)
    if (cached !== undefined) return cached
    const found = walkDir(parts, create)
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

  const applyLayer = async (layer: ExtractLayer, index: number): Promise<void> => {
    const hash = crypto.createHash('sha256')
    const writtenThisLayer = new Set<string>()
    const dirModes: Array<[string, number]> = []
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
    const extract = tarStream.extract()
    let reported = 0
    source.on('data', (chunk: Buffer) => {
      hash.update(chunk)
      reported += chunk.length
    })
    source.on('error', (err: Error) => extract.destroy(err))
    source.pipe(extract)

    for await (const entry of extract) {
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
        continue
      }
      const base = parts[parts.length - 1]
      const dir = resolveDir(parts.slice(0, -1), true)
      const target = path.join(dir, base)
      if (base === '.wh..wh..opq') {
        for (const child of fs.readdirSync(dir)) {
          const p = path.join(dir, child)
          if (!writtenThisLayer.has(p)) removeEntry(p)
        }
        entry.resume()
        continue
      }
      if (base.startsWith('.wh.')) {
        const hidden = base.slice(4)
        if (hidden === '' || hidden === '.' || hidden === '..') fail(`bad whiteout ${JSON.stringify(header.name)}`)
        removeEntry(path.join(dir, hidden))
        entry.resume()
        continue
      }
      writtenThisLayer.add(target)
      if (type === 'directory') {
        const st = lstat(target)
        if (st === null || !st.isDirectory()) {
          removeEntry(target)
          fs.mkdirSync(target, { mode: 0o700 })
        }
        chown(target, header)
        // Modes of directories are set after the layer, so a read-only one can still be filled.
        dirModes.push([target, (header.mode ?? 0o755) & 0o7777])
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
            result.bytes += chunk.length
            if (result.bytes > input.maxBytes) fail(`the image unpacks to more than ${input.maxBytes} bytes`)
            for (let off = 0; off < chunk.length;) off += fs.writeSync(fd, chunk, off)
            fileHash.update(chunk)
            size += chunk.length
          }
          fileHashes.set(fs.fstatSync(fd).ino, `${size} ${fileHash.digest('hex')}`)
          // Through the fd just created: no second lookup of the path. Owner first: chown clears setuid bits.
          if (input.asRoot) fs.fchownSync(fd, hostId(header.uid), hostId(header.gid))
          fs.fchmodSync(fd, (header.mode ?? 0o644) & 0o7777)
        } finally {
          fs.closeSync(fd)
        }
      } else if (type === 'symlink') {
        removeEntry(target)
        fs.symlinkSync(String(header.linkname ?? ''), target)
        resolvedDirs.clear()
        chown(target, header)
        entry.resume()
      } else if (type === 'link') {
        const linkParts = components(header.linkname ?? '')
        if (linkParts.length === 0) fail(`hard link ${JSON.stringify(header.name)} has no target`)
        const from = path.join(resolveDir(linkParts.slice(0, -1), false), linkParts[linkParts.length - 1])
        const st = lstat(from)
        if (st === null)
          fail(`hard link ${JSON.stringify(header.name)} points at missing ${JSON.stringify(header.linkname)}`)
        if (st.isDirectory()) fail(`hard link ${JSON.stringify(header.name)} points at a directory`)
        if (from !== target) {
          removeEntry(target)
          fs.linkSync(from, target)
        }
        entry.resume()
      } else if (type === 'character-device' || type === 'block-device') {
        result.droppedDevices += 1
        writtenThisLayer.delete(target)
        entry.resume()
      } else {
        // FIFOs and anything tar-stream does not know: not needed to run an image.
        result.droppedOther += 1
        writtenThisLayer.delete(target)
        entry.resume()
      }
    }
    if (child !== null) {
      const code: number = await new Promise((resolve) =>
        child.exitCode !== null ? resolve(child.exitCode) : child.on('close', resolve),
      )
      if (code !== 0) fail(`zstd could not decompress layer ${index + 1}`)
    }
    // Tar archives may carry zero padding after their end: it is part of the hashed stream.
    await new Promise<void>((resolve, reject) => {
      if (source.readableEnded) return resolve()
      source.on('end', resolve)
      source.on('error', reject)
      source.resume()
    })
    // chmod follows links: only what is still a directory (a later entry may have replaced it).
    for (const [p, mode] of dirModes.reverse()) if (lstat(p)?.isDirectory()) fs.chmodSync(p, mode)
    const actual = `sha256:${hash.digest('hex')}`
    if (actual !== layer.diffId) fail(`layer ${index + 1} does not match its diff_id ${layer.diffId} (got ${actual})`)
    post({ type: 'layer', index, bytes: reported })
  }

  for (let i = 0; i < input.count; i += 1) await applyLayer(await nextLayer(i), i)
  result.fileHashes = [...fileHashes]
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
  input: { root: string; known?: Array<[number, string]> },
): TreeSummaryResult {
  const root = input.root
  // Files the extractor wrote and hashed: "size hex" by inode, used when the size still matches.
  const known = new Map<number, string>(input.known ?? [])
  const fs = req('node:fs')
  const path = req('node:path')
  const crypto = req('node:crypto')
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
      const seen = known.get(st.ino)
      payload = seen !== undefined && seen.startsWith(`${st.size} `) ? seen : `${st.size} ${hashFile(abs)}`
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
