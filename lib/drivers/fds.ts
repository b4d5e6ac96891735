/**
 * Numeric file descriptors opened and closed through the libuv pool: what native spawn's stdio
 * and extraFds take (a FileHandle closes itself when collected), without a create ever waiting
 * on the main thread for a filesystem busy with its journal.
 */
import fs from 'node:fs'
import { promisify } from 'node:util'

const open = promisify(fs.open)
const close = promisify(fs.close)

export function openFd(file: string, flags: string, mode?: number): Promise<number> {
  return open(file, flags, mode)
}

/** Closes fd; a close that fails has nothing left to undo. */
export function closeFd(fd: number): Promise<void> {
  return close(fd).catch(() => {})
}
