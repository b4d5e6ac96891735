/**
 * writeFiles (native/src/addon/write_files.cc): the batch writer snapshots store their small files with.
 * Each file is new, gets its content, owner, mode and mtime; an existing path or a link there stops
 * the batch with an error naming the path; bad input is S001 naming the value.
 */
import { lstatSync, mkdirSync, readFileSync, readlinkSync, statSync, symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { writeFiles } from '../../lib/native.js'
import { ensureNativeBuilt, makeTempDir } from './helpers.js'

let tmp: { dir: string; cleanup: () => void }
beforeAll(() => {
  ensureNativeBuilt()
  tmp = makeTempDir('krunbox-write-files-')
})
afterAll(() => tmp.cleanup())

const asRoot = process.getuid?.() === 0

describe('writeFiles', () => {
  it('creates every file of a batch with its content, mode and mtime (and owner, as root)', async () => {
    const files = Array.from({ length: 300 }, (_, i) => ({
      path: join(tmp.dir, `f${i}`),
      data: Buffer.from(`content ${i}\n`.repeat(i)),
      mode: i % 2 ? 0o640 : 0o1755,
      mtimeMs: 1_500_000_000_000 + i * 1001,
      ...(asRoot ? { uid: 1000 + i, gid: 2000 + i } : {}),
    }))
    await writeFiles(files)
    for (const [i, f] of files.entries()) {
      const st = statSync(f.path)
      expect(readFileSync(f.path).equals(f.data)).toBe(true)
      expect(st.mode & 0o7777).toBe(f.mode)
      expect(st.mtimeMs).toBe(f.mtimeMs)
      if (asRoot) expect([st.uid, st.gid]).toEqual([1000 + i, 2000 + i])
    }
  })

  it('64 batches at once, their buffers held by nothing but the call, all land intact', async () => {
    const dirs = Array.from({ length: 64 }, (_, d) => {
      const dir = join(tmp.dir, `many-${d}`)
      mkdirSync(dir)
      return dir
    })
    const content = (d: number, i: number) => `batch ${d} file ${i}\n`.repeat(100)
    await Promise.all(dirs.map((dir, d) => writeFiles(Array.from({ length: 50 }, (_, i) => ({ path: join(dir, `f${i}`), data: Buffer.from(content(d, i)), mode: 0o600 })))))
    for (const [d, dir] of dirs.entries()) {
      for (let i = 0; i < 50; i++) expect(readFileSync(join(dir, `f${i}`), 'utf8')).toBe(content(d, i))
    }
  })

  it('never writes over an existing file or through a link, and names the path that failed', async () => {
    const existing = join(tmp.dir, 'existing')
    writeFileSync(existing, 'keep')
    const target = join(tmp.dir, 'target')
    writeFileSync(target, 'keep too')
    const link = join(tmp.dir, 'link')
    symlinkSync(target, link)
    const before = join(tmp.dir, 'before')
    const after = join(tmp.dir, 'after')
    const err = await writeFiles([
      { path: before, data: Buffer.from('1'), mode: 0o644 },
      { path: existing, data: Buffer.from('2'), mode: 0o644 },
      { path: after, data: Buffer.from('3'), mode: 0o644 },
    ]).catch((e) => e)
    expect(err).toMatchObject({ code: 'S313', details: { syscall: 'open', errnoName: 'EEXIST', path: existing } })
    expect(readFileSync(existing, 'utf8')).toBe('keep')
    expect(readFileSync(before, 'utf8')).toBe('1')
    expect(() => lstatSync(after)).toThrow() // the batch stopped at the failure
    const throughLink = await writeFiles([{ path: link, data: Buffer.from('x'), mode: 0o644 }]).catch((e) => e)
    expect(throughLink).toMatchObject({ code: 'S313', details: { path: link } })
    expect(readlinkSync(link)).toBe(target)
    expect(readFileSync(target, 'utf8')).toBe('keep too')
  })

  it('refuses bad input with S001 naming it, before writing anything', async () => {
    const path = join(tmp.dir, 'never')
    await expect(writeFiles('x' as never)).rejects.toMatchObject({ code: 'S001', message: expect.stringContaining('string "x"') })
    await expect(writeFiles([{ path, data: 'text' as never, mode: 0o644 }])).rejects.toMatchObject({ code: 'S001', message: expect.stringContaining('files[0].data') })
    await expect(writeFiles([{ path, data: Buffer.from(''), mode: 0o644 }, { path: 7 as never, data: Buffer.from(''), mode: 0o644 }])).rejects.toMatchObject({ code: 'S001', message: expect.stringContaining('files[1].path') })
    await expect(writeFiles([{ path, data: Buffer.from(''), mode: 0o70000 }])).rejects.toMatchObject({ code: 'S001', message: expect.stringContaining('mode') })
    expect(() => lstatSync(path)).toThrow()
  })
})
