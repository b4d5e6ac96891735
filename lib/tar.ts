/** Host side of directory transfers: a tar stream of a host tree, and unpacking one onto the host. */
import crypto from 'node:crypto'
import fs from 'node:fs'
import fsp from 'node:fs/promises'
import path from 'node:path'
import { Readable } from 'node:stream'
import tar from 'tar-stream'
import { SandboxError } from './errors.js'
import { describe } from './options.js'
import { writeSparse } from './sparse.js'
import { readUntrustedTar, type TarEntry } from './untrusted-tar.js'
import { errors } from './protocol/errors.gen.js'

/**
 * Packs a host directory as a tar stream (files streamed one at a time, symlinks kept as links,
 * FIFOs, sockets and devices skipped). `bytes()` counts the file contents sent so far.
 */
export function pack(root: string): { stream: Readable; bytes: () => number } {
  const packer = tar.pack()
  let bytes = 0
  // Adds one entry; file contents stream in with backpressure, the callback fires when it is written.
  const add = (header: Partial<tar.Header> & { name: string }, file?: fsp.FileHandle) =>
    new Promise<void>((resolve, reject) => {
      const sink = packer.entry(header as tar.Header, (err) => (err ? reject(err) : resolve()))
      // A reader that stops early destroys the pack, and the pack its entry: unheard, that error
      // would be an uncaught exception in the host.
      sink.on('error', reject)
      if (!file) return
      // Exactly the size announced in the header, even if the file grows meanwhile.
      const source = file.createReadStream({ start: 0, end: Math.max(0, (header.size ?? 0) - 1), autoClose: true })
      sink.on('error', () => source.destroy())
      if (header.size === 0) {
        source.destroy()
        sink.end(undefined)
        return
      }
      source.on('error', reject)
      source.on('data', (chunk) => {
        bytes += chunk.length
        if (!sink.write(chunk)) {
          source.pause()
          sink.once('drain', () => source.resume())
        }
      })
      source.on('end', () => sink.end(undefined))
    })
  const walk = async (dir: string, rel: string): Promise<void> => {
    for (const entry of await fsp.readdir(dir, { withFileTypes: true })) {
      const abs = path.join(dir, entry.name)
      const name = rel ? `${rel}/${entry.name}` : entry.name
      const st = await fsp.lstat(abs)
      const common = { name, mode: st.mode & 0o7777, mtime: st.mtime }
      if (st.isSymbolicLink()) await add({ ...common, type: 'symlink', linkname: await fsp.readlink(abs) })
      else if (st.isDirectory()) {
        await add({ ...common, type: 'directory' })
        await walk(abs, name)
      } else if (st.isFile()) {
        // O_NONBLOCK|O_NOFOLLOW: a FIFO or symlink swapped in since the lstat can neither block nor redirect us.
        const file = await openRegularFile(abs)
        if (file) await add({ ...common, size: file.size }, file.handle)
      }
    }
  }
  walk(root, '').then(
    () => packer.finalize(),
    (err) => packer.destroy(err),
  )
  // tar-stream's Pack is a streamx stream; wrap it so callers get a Node Readable.
  return { stream: Readable.from(packer as unknown as AsyncIterable<Buffer>), bytes: () => bytes }
}

/** Opens a regular file without following a symlink or blocking on a FIFO; null when it is not one any more. */
async function openRegularFile(file: string): Promise<{ handle: fsp.FileHandle; size: number } | null> {
  const handle = await fsp
    .open(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK)
    .catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ELOOP' || err.code === 'ENXIO' || err.code === 'ENOENT') return null
      throw err
    })
  if (!handle) return null
  const st = await handle.stat()
  if (!st.isFile()) {
    await handle.close()
    return null
  }
  return { handle, size: st.size }
}

/**
 * Unpacks a tar stream under dest without ever writing outside it. The stream may come from a
 * hostile agent (read by lib/untrusted-tar.ts), and dest may hold what an earlier download
 * planted or be shared with another local user who owns one of its subdirectories, so:
 *  - names are checked lexically (no absolute names, no `..`: untrusted-tar.ts);
 *  - dest is opened once (it may be a symlink: the caller's choice) and held by fd; each entry's
 *    parents are walked from it, every component opened with O_DIRECTORY|O_NOFOLLOW relative to
 *    the one before (through /proc/self/fd/N/name: Node has no openat) and created when missing;
 *    a symlink (or anything not a directory) on the way is S210. A subdirectory swapped for a link
 *    after its open cannot redirect a write: every write, rename, link and chmod is relative to
 *    the held parent fd;
 *  - files are written to a fresh temp name (O_EXCL|O_NOFOLLOW) and renamed over the leaf, so an
 *    existing symlink there is replaced, never written through;
 *  - symlink entries are recreated as symlinks (where they point is not our business: nothing is
 *    ever written through one); hardlinks only to regular files this run extracted;
 *  - modes lose setuid/setgid/sticky; devices and FIFOs are skipped; owners are never restored.
 * Files' sizes (as their headers announce them, holes included) count against `maxBytes`:
 * the entry that would pass it is refused with `overCap` before any of it is written, and zero
 * runs are written as holes, so a sparse file stays sparse on the host.
 */
export async function unpack(
  source: Readable,
  dest: string,
  limit: { maxBytes: number; overCap: (size: number) => SandboxError } = {
    maxBytes: Infinity,
    overCap: () => new SandboxError('S404', 'over the cap'),
  },
): Promise<{ bytes: number }> {
  const root = await prepareRoot(dest)
  try {
    return await unpackInto(source, root, dest, limit)
  } finally {
    await root.close().catch(() => {})
  }
}

async function unpackInto(
  source: Readable,
  root: fsp.FileHandle,
  dest: string,
  limit: { maxBytes: number; overCap: (size: number) => SandboxError },
): Promise<{ bytes: number }> {
  /** Regular files this run wrote (relative names): the only allowed hardlink targets. */
  const written = new Set<string>()
  /** Directory modes are applied at the end, so a read-only directory can still be filled. */
  const dirModes: [string[], number][] = []
  let bytes = 0
  const place = async (entry: TarEntry): Promise<void> => {
    const { parts, path: rel } = entry
    if (parts.length === 0) return // "./": the destination itself
    const leaf = parts[parts.length - 1]
    written.delete(rel)
    const parent = await openParents(root, parts, dest)
    try {
      const target = at(parent, leaf)
      if (entry.kind === 'directory') {
        await makeDirectory(target, dest, rel)
        dirModes.push([parts, safeMode(entry.header.mode, 0o755)])
      } else if (entry.kind === 'file') {
        bytes += await writeFile(entry.content, parent, leaf, rel, entry.header.mode)
        written.add(rel)
      } else if (entry.kind === 'symlink') {
        await replaceNonDirectory(target, dest, rel)
        await fsp.symlink(entry.target, target)
      } else if (entry.kind === 'hardlink') {
        const link = entry.target
        if (!written.has(link.path))
          throw refuse(
            `hardlink entry ${describe(entry.name)} points to ${describe(entry.header.linkname)}, which is not a file extracted by this download`,
            dest,
          )
        const linkParent = await openParents(root, link.parts, dest)
        try {
          const source = at(linkParent, link.parts[link.parts.length - 1])
          if (!(await fsp.lstat(source)).isFile())
            throw refuse(`hardlink target ${describe(entry.header.linkname)} is not a regular file`, dest)
          await replaceNonDirectory(target, dest, rel)
          await fsp.link(source, target)
        } finally {
          await linkParent.close().catch(() => {})
        }
        written.add(rel)
      }
      // Devices, FIFOs and anything else are skipped.
    } finally {
      if (parent !== root) await parent.close().catch(() => {})
    }
  }
  try {
    await readUntrustedTar(source, place, {
      maxBytes: limit.maxBytes,
      overCap: (total) => limit.overCap(total),
      refuse: (message) => refuse(message, dest),
    })
    for (const [parts, mode] of dirModes.reverse()) {
      // Reached again through held fds, never a link: a chmod never lands outside dest.
      const dir = await openParents(root, [...parts, '.'], dest).catch(() => null)
      if (dir === null) continue
      try {
        await dir.chmod(mode)
      } finally {
        if (dir !== root) await dir.close().catch(() => {})
      }
    }
  } catch (err) {
    if (err instanceof SandboxError) throw err
    throw errors.fsBadRequest({ path: dest, reason: `download failed: ${(err as Error).message}` }, { cause: err })
  }
  return { bytes }
}

function refuse(message: string, dest: string): SandboxError {
  return errors.fsBadRequest({ path: dest, reason: `download refused: ${message}` })
}

/** Name (one component) inside the directory held by `dir`: the magic link is that very directory. */
function at(dir: fsp.FileHandle, name: string): string {
  return `/proc/self/fd/${dir.fd}/${name}`
}

const DIRECTORY_NOFOLLOW =
  fs.constants.O_RDONLY | fs.constants.O_DIRECTORY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK

/** Creates dest if needed and holds it open (it may be a symlink: the one thing we do follow). */
async function prepareRoot(dest: string): Promise<fsp.FileHandle> {
  await fsp.mkdir(dest, { recursive: true })
  const handle = await fsp.open(dest, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK).catch(() => null)
  if (handle === null || !(await handle.stat()).isDirectory()) {
    await handle?.close()
    throw errors.fsWrongType({ path: dest, reason: 'the download destination is not a directory' })
  }
  return handle
}

/**
 * The parent directory of an entry, open: each component opened (or made) relative to the one
 * before, never through a link. The caller closes it unless it is root. A name part of '.' as the
 * last one returns the entry's own directory (for its chmod).
 */
async function openParents(root: fsp.FileHandle, parts: string[], dest: string): Promise<fsp.FileHandle> {
  let dir = root
  try {
    for (const [i, part] of parts.slice(0, -1).entries()) {
      const next = await openChildDirectory(dir, part, parts.slice(0, i + 1).join('/'), dest)
      if (dir !== root) await dir.close().catch(() => {})
      dir = next
    }
    return dir
  } catch (err) {
    if (dir !== root) await dir.close().catch(() => {})
    throw err
  }
}

async function openChildDirectory(
  dir: fsp.FileHandle,
  part: string,
  rel: string,
  dest: string,
): Promise<fsp.FileHandle> {
  const open = async () => {
    try {
      return await fsp.open(at(dir, part), DIRECTORY_NOFOLLOW)
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      if (code !== 'ELOOP' && code !== 'ENOTDIR') throw err
      // O_NOFOLLOW|O_DIRECTORY on a link is ENOTDIR: say which it was.
      const link = (await fsp.lstat(at(dir, part)).catch(() => null))?.isSymbolicLink()
      throw refuse(
        `${describe(rel)} is ${link ? 'a symlink' : 'not a directory'}; nothing is extracted through it`,
        dest,
      )
    }
  }
  try {
    return await open()
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
  }
  await fsp.mkdir(at(dir, part), { mode: 0o755 }).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'EEXIST') throw err
  })
  return await open()
}

/** A real directory at target: a file or symlink there is replaced (unlinked, not followed). */
async function makeDirectory(target: string, dest: string, rel: string): Promise<void> {
  const st = await fsp.lstat(target).catch(() => null)
  if (st?.isDirectory()) return
  await replaceNonDirectory(target, dest, rel)
  await fsp.mkdir(target, { mode: 0o755 })
}

/** Removes a file or symlink at target (unlink never follows); a directory there is refused. */
async function replaceNonDirectory(target: string, dest: string, rel: string): Promise<void> {
  const st = await fsp.lstat(target).catch(() => null)
  if (!st) return
  if (st.isDirectory()) throw refuse(`${describe(rel)} is a directory on the host; it is not replaced`, dest)
  await fsp.unlink(target)
}

async function writeFile(
  entry: AsyncIterable<unknown>,
  parent: fsp.FileHandle,
  leaf: string,
  rel: string,
  mode: number | undefined,
): Promise<number> {
  const tmp = `.krunbox-${process.pid}-${crypto.randomBytes(6).toString('hex')}`
  const handle = await fsp.open(
    at(parent, tmp),
    fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW,
    0o600,
  )
  let bytes = 0
  try {
    bytes = await writeSparse(handle, entry)
    await handle.chmod(safeMode(mode, 0o644))
    await handle.close()
    const st = await fsp.lstat(at(parent, leaf)).catch(() => null)
    if (st?.isDirectory())
      throw errors.fsBadRequest({ path: rel, reason: 'a directory on the host; it is not replaced by a file' })
    await fsp.rename(at(parent, tmp), at(parent, leaf))
  } catch (err) {
    await handle.close().catch(() => {})
    await fsp.rm(at(parent, tmp), { force: true })
    throw err
  }
  return bytes
}

/** Permission bits only: a download never makes setuid, setgid or sticky files on the host. */
function safeMode(mode: number | undefined, fallback: number): number {
  return typeof mode === 'number' && Number.isInteger(mode) ? mode & 0o777 : fallback
}
