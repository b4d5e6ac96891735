/** Host side of directory transfers: a tar stream of a host tree, and unpacking one onto the host. */
import fs from 'node:fs'
import fsp from 'node:fs/promises'
import path from 'node:path'
import { Readable } from 'node:stream'
import tar from 'tar-stream'
import { SandboxError } from './errors.js'

/** Packs a host directory as a tar stream (files streamed one at a time, symlinks kept as links). */
export function pack(root: string): Readable {
  const packer = tar.pack()
  // Adds one entry; file contents stream in with backpressure, the callback fires when it is written.
  const add = (header: Partial<tar.Header> & { name: string }, file?: string) =>
    new Promise<void>((resolve, reject) => {
      const sink = packer.entry(header as tar.Header, (err) => (err ? reject(err) : resolve()))
      if (!file) return
      const source = fs.createReadStream(file)
      source.on('error', reject)
      source.on('data', (chunk) => {
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
      } else if (st.isFile()) await add({ ...common, size: st.size }, abs)
    }
  }
  walk(root, '').then(
    () => packer.finalize(),
    (err) => packer.destroy(err),
  )
  // tar-stream's Pack is a streamx stream; wrap it so callers get a Node Readable.
  return Readable.from(packer as unknown as AsyncIterable<Buffer>)
}

/** Unpacks a tar stream under dest, refusing entries that would escape it. */
export async function unpack(source: Readable, dest: string): Promise<{ bytes: number }> {
  const extract = tar.extract()
  const root = path.resolve(dest)
  await fsp.mkdir(root, { recursive: true })
  // Feed the (streamx) extractor by hand, with backpressure both ways.
  source.on('data', (chunk: Buffer) => {
    if (!extract.write(chunk)) source.pause()
  })
  extract.on('drain', () => source.resume())
  source.on('end', () => extract.end(undefined))
  source.on('error', (err) => extract.destroy(err))
  let bytes = 0
  for await (const entry of extract) {
    const header = entry.header
    const target = path.resolve(root, header.name)
    if (target !== root && !target.startsWith(root + path.sep)) {
      source.destroy()
      throw new SandboxError('S210', `tar entry ${header.name} escapes ${dest}`)
    }
    if (header.type === 'directory') await fsp.mkdir(target, { recursive: true, mode: header.mode })
    else if (header.type === 'symlink') {
      await fsp.rm(target, { force: true })
      await fsp.symlink(header.linkname ?? '', target)
    } else if (header.type === 'file') {
      await fsp.mkdir(path.dirname(target), { recursive: true })
      const out = fs.createWriteStream(target, { mode: header.mode })
      for await (const chunk of entry) {
        bytes += (chunk as Buffer).length
        if (!out.write(chunk)) await new Promise<void>((r) => out.once('drain', () => r()))
      }
      await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())))
      continue
    }
    entry.resume()
  }
  return { bytes }
}
