/**
 * Holes stay holes on the host: a file the sandbox made sparse (`truncate -s 100G`) costs it
 * nothing, so its zeros must not become the host's disk. Writers skip all-zero pieces (seeking
 * past them) and set the length at the end, so zero runs become holes again.
 */
import type { FileHandle } from 'node:fs/promises'

/**
 * Whether every byte of buf is 0: its first byte is, and each byte equals the next (one memcmp of
 * buf against itself shifted by a byte). Self-contained, so the layer extractor's worker can run
 * it from its source too.
 */
export function isAllZero(buf: Buffer): boolean {
  return buf.length === 0 || (buf[0] === 0 && buf.subarray(1).equals(buf.subarray(0, buf.length - 1)))
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
