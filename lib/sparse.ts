/**
 * Holes stay holes on the host: a file the sandbox made sparse (`truncate -s 100G`) costs it
 * nothing, so its zeros must not become the host's disk. Writers skip all-zero pieces (seeking
 * past them) and set the length at the end, so zero runs become holes again.
 */
const ZEROS = Buffer.alloc(64 * 1024)

/** Whether every byte of buf is 0 (memcmp against a zero page, 64 KiB at a time). */
export function isAllZero(buf: Buffer): boolean {
  for (let off = 0; off < buf.length; off += ZEROS.length) {
    const n = Math.min(ZEROS.length, buf.length - off)
    if (ZEROS.compare(buf, off, off + n, 0, n) !== 0) return false
  }
  return true
}
