/** A small JSON file that someone else (the agent, another process) wrote, read without trusting it. */
import fs from 'node:fs'

/**
 * Reads a small JSON file that someone else may have written: never follows a final symlink,
 * never blocks (FIFO), only regular files of at most `max` bytes. Null on anything else.
 */
export function readBoundedJson(file: string, max: number): unknown {
  const got = readBoundedJsonChecked(file, max)
  return got.kind === 'ok' ? got.value : null
}

/** What readBoundedJsonChecked found: the value, or why there is none (a link or a FIFO is never read through). */
export type BoundedJson =
  | { kind: 'ok'; value: unknown }
  | { kind: 'missing' }
  | { kind: 'link' }
  | { kind: 'notRegular' }
  | { kind: 'tooLarge' }
  | { kind: 'unreadable'; reason: string }

/** readBoundedJson that says why a file was not read, for a caller that reports it. */
export function readBoundedJsonChecked(file: string, max: number): BoundedJson {
  let fd: number
  try {
    fd = fs.openSync(
      file,
      fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK | fs.constants.O_NOCTTY,
    )
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOENT') return { kind: 'missing' }
    if (code === 'ELOOP') return { kind: 'link' }
    return { kind: 'unreadable', reason: (err as Error).message }
  }
  try {
    const st = fs.fstatSync(fd)
    if (!st.isFile()) return { kind: 'notRegular' }
    if (st.size > max) return { kind: 'tooLarge' }
    const buf = Buffer.alloc(Math.min(max + 1, st.size + 1))
    let length = 0
    // Read until EOF or past the cap (the file may grow after the fstat).
    while (length < buf.length) {
      const n = fs.readSync(fd, buf, length, buf.length - length, null)
      if (n === 0) break
      length += n
    }
    if (length > max) return { kind: 'tooLarge' }
    return { kind: 'ok', value: JSON.parse(buf.subarray(0, length).toString('utf8')) }
  } catch (err) {
    return { kind: 'unreadable', reason: (err as Error).message }
  } finally {
    fs.closeSync(fd)
  }
}
