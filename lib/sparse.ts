/**
 * Holes stay holes on the host: a file the sandbox made sparse (`truncate -s 100G`) costs it
 * nothing, so its zeros must not become the host's disk. Writers skip all-zero pieces (seeking
 * past them) and set the length at the end, so zero runs become holes again.
 */
import type { FileHandle } from 'node:fs/promises'

const ZEROS = Buffer.alloc(64 * 1024)

/** Whether every byte of buf is 0 (memcmp against a zero page, 64 KiB at a time). */
export function isAllZero(buf: Buffer): boolean {
  for (let off = 0; off < buf.length; off += ZEROS.length) {
    const n = Math.min(ZEROS.length, buf.length - off)
    if (ZEROS.compare(buf, off, off + n, 0, n) !== 0) return false
  }
  return true
}

/** Writes `chunks` into an empty file from offset 0, zero runs as holes; resolves the length written. */
export async function writeSparse(handle: FileHandle, chunks: AsyncIterable<unknown>): Promise<number> {
  let bytes = 0
  for await (const chunk of chunks) {
    const data = chunk as Buffer
    if (!isAllZero(data)) await handle.write(data, 0, data.length, bytes)
    bytes += data.length
  }
  await handle.truncate(bytes)
  return bytes
}
