/** The last bytes of a log file (a sandbox process's stderr, a guest console), for boot errors. */
import fs from 'node:fs'

export const TAIL_BYTES = 4096

export function readTail(file: string, bytes = TAIL_BYTES): string {
  let fd: number
  try {
    fd = fs.openSync(file, 'r')
  } catch {
    return ''
  }
  try {
    const size = fs.fstatSync(fd).size
    const length = Math.min(size, bytes)
    const buf = Buffer.alloc(length)
    fs.readSync(fd, buf, 0, length, size - length)
    return buf.toString('utf8').trimEnd()
  } finally {
    fs.closeSync(fd)
  }
}
