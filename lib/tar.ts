/** Host side of directory transfers: a tar stream of a host tree, and unpacking one onto the host. */
import fs from 'node:fs'
import fsp from 'node:fs/promises'
import path from 'node:path'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import tar from 'tar-stream'
import { SandboxError } from './errors.js'

/** Packs a host directory as a tar stream (files streamed one at a time, symlinks kept as links). */
export function pack(root: string): Readable {
  const packer = tar.pack()
  const walk = async (dir: string, rel: string): Promise<void> => {
    for (const entry of await fsp.readdir(dir, { withFileTypes: true })) {
      const abs = path.join(dir, entry.name)
      const name = rel ? `${rel}/${entry.name}` : entry.name
      const st = await fsp.lstat(abs)
      if (entry.isSymbolicLink()) {
        packer.entry({ name, type: 'symlink', linkname: await fsp.readlink(abs), mode: st.mode & 0o7777, mtime: st.mtime })
      } else if (entry.isDirectory()) {
        packer.entry({ name, type: 'directory', mode: st.mode & 0o7777, mtime: st.mtime })
        await walk(abs, name)
      } else if (entry.isFile()) {
        const sink = packer.entry({ name, size: st.size, mode: st.mode & 0o7777, mtime: st.mtime })
        await pipeline(fs.createReadStream(abs), sink)
      }
    }
  }
  walk(root, '').then(
    () => packer.finalize(),
    (err) => packer.destroy(err),
  )
  return packer as unknown as Readable
}

/** Unpacks a tar stream under dest, refusing entries that would escape it. */
export async function unpack(source: Readable, dest: string): Promise<{ bytes: number }> {
  const extract = tar.extract()
  let bytes = 0
  const root = path.resolve(dest)
  await fsp.mkdir(root, { recursive: true })
  const done = new Promise<void>((resolve, reject) => {
    extract.on('entry', (header, stream, next) => {
      const target = path.resolve(root, header.name)
      if (target !== root && !target.startsWith(root + path.sep)) {
        stream.resume()
        return reject(new SandboxError('S210', `tar entry ${header.name} escapes ${dest}`))
      }
      const finish = (p: Promise<unknown>) => p.then(() => next(), reject)
      if (header.type === 'directory') {
        stream.resume()
        finish(fsp.mkdir(target, { recursive: true, mode: header.mode }))
      } else if (header.type === 'symlink') {
        stream.resume()
        finish(fsp.rm(target, { force: true }).then(() => fsp.symlink(header.linkname ?? '', target)))
      } else if (header.type === 'file') {
        stream.on('data', (d: unknown) => {
          bytes += (d as Buffer).length
        })
        finish(fsp.mkdir(path.dirname(target), { recursive: true }).then(() => pipeline(stream, fs.createWriteStream(target, { mode: header.mode }))))
      } else {
        stream.resume()
        next()
      }
    })
    extract.on('finish', resolve)
    extract.on('error', reject)
  })
  await Promise.all([pipeline(source, extract), done])
  return { bytes }
}
