/** A small JSON file that someone else (the agent, another process) wrote, read without trusting it. */
import fs from 'node:fs'

/**
 * Reads a small JSON file that someone else may have written: never follows a final symlink,
 * never blocks (FIFO), only regular files of at most `max` bytes. Null on anything else.
 */
export function readBoundedJson(file: string, max: number): unknown {
  let fd: number
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK | fs.constants.O_NOCTTY)
  } catch {
    return null
  }
  try {
    const st = fs.fstatSync(fd)
    if (!st.isFile() || st.size > max) return null
    const buf = Buffer.alloc(Math.min(max + 1, st.size + 1))
    let length = 0
    // Read until EOF or past the cap (the file may grow after the fstat).
    while (length < buf.length) {
      const n = fs.readSync(fd, buf, length, buf.length - length, null)
      if (n === 0) break
      length += n
    }
    if (length > max) return null
    return JSON.parse(buf.subarray(0, length).toString('utf8'))
  } catch {
    return null
  } finally {
    fs.closeSync(fd)
  }
}
