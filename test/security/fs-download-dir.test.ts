/**
 * download() of a directory unpacks a tar stream (lib/tar.ts) into a destination that may hold a
 * subdirectory owned by another local user (here: nobody). That user swaps the subdirectory for a
 * link to a root-only directory, before the download or while it writes into it: nothing may land
 * outside the destination. The mid-write swap is made deterministic by feeding unpack() the tar
 * stream by hand and swapping once its temporary file exists: the write then completes in the
 * directory held open (now renamed), and the next entry through the link is refused (S210).
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Readable } from 'node:stream'
import tarStream from 'tar-stream'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runtime } from '../../lib/runtime.js'
import { unpack } from '../../lib/tar.js'
import { testRuntime } from '../helpers/runtime.js'

const NOBODY = 65534
let work: string
let rt: Runtime

function asNobody(argv: string[]): void {
  execFileSync('setpriv', [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', ...argv], { stdio: 'pipe' })
}

beforeAll(() => {
  rt = testRuntime()
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-sec-download-'))
  fs.chmodSync(work, 0o755)
})
afterAll(async () => {
  await rt.close()
  fs.rmSync(work, { recursive: true, force: true })
})

/** A destination with a subdirectory nobody owns, and a root-only directory it wants written. */
function arena(name: string): { dest: string; sub: string; rootOnly: string } {
  const dest = path.join(work, name, 'dest')
  fs.mkdirSync(dest, { recursive: true })
  const sub = path.join(dest, 'sub')
  fs.mkdirSync(sub)
  fs.chownSync(sub, NOBODY, NOBODY)
  fs.chmodSync(dest, 0o777) // nobody may rename its subdirectory and put a link in its place
  const rootOnly = path.join(work, name, 'root-only')
  fs.mkdirSync(rootOnly, { mode: 0o700 })
  return { dest, sub, rootOnly }
}

async function tarOf(files: Record<string, Buffer>): Promise<Buffer> {
  const pack = tarStream.pack()
  for (const [name, data] of Object.entries(files)) pack.entry({ name, size: data.length, mode: 0o644 }, data)
  pack.finalize()
  const chunks: Buffer[] = []
  for await (const c of pack as unknown as AsyncIterable<Buffer>) chunks.push(c)
  return Buffer.concat(chunks)
}

describe('download of a directory into a destination shared with another user', () => {
  it('download: a subdirectory swapped for a link to a root-only directory while a file is written into it is held (the write stays in the held directory; the next entry is S210)', async () => {
    const { dest, sub, rootOnly } = arena('mid-write')
    const content = Buffer.alloc(256 * 1024, 'a')
    const archive = await tarOf({ 'sub/a.txt': content, 'sub/b.txt': Buffer.from('b') })
    const source = new Readable({ read() {} })
    const result = unpack(source, dest).then(
      () => null,
      (e: unknown) => e,
    )
    // The first header and a part of a.txt: unpack opens its temporary file in sub and waits for more.
    source.push(archive.subarray(0, 512 + 4096))
    await expect
      .poll(() => fs.readdirSync(sub).some((n) => n.startsWith('.krunbox-')), { timeout: 10_000, interval: 10 })
      .toBe(true)
    asNobody(['mv', sub, path.join(dest, 'moved')])
    asNobody(['ln', '-s', rootOnly, sub])
    source.push(archive.subarray(512 + 4096))
    source.push(null)
    const err = await result
    expect(err).toMatchObject({ code: 'S210', message: expect.stringContaining('"sub" is a symlink') })
    expect(fs.readdirSync(rootOnly)).toEqual([])
    // a.txt was finished and renamed inside the directory it was opened in, whatever is at its old name.
    expect(fs.readFileSync(path.join(dest, 'moved', 'a.txt')).equals(content)).toBe(true)
  })

  it('download: a subdirectory replaced by a link to a root-only directory before the download is never written through (the link is replaced or the entry refused)', async () => {
    const { dest, sub, rootOnly } = arena('before')
    asNobody(['mv', sub, path.join(dest, 'moved')])
    asNobody(['ln', '-s', rootOnly, sub])
    const sb = await rt.create({ image: 'base', driver: 'namespace' })
    try {
      await sb.exec('sh', ['-c', 'mkdir -p /workspace/tree/sub && echo planted > /workspace/tree/sub/x.txt'])
      const err = await sb.fs.download('/workspace/tree', dest).then(
        () => null,
        (e: unknown) => e,
      )
      if (err !== null) expect(err).toMatchObject({ code: 'S210' })
      else expect(fs.lstatSync(sub).isDirectory()).toBe(true) // the link was replaced (unlinked), not followed
    } finally {
      await sb.stop()
    }
    expect(fs.readdirSync(rootOnly)).toEqual([])
  })
})
