/**
 * The files of an image archive, opened so that no open can hold a thread and nothing but a
 * regular file is read. open(2) of a FIFO waits for a writer in the libuv thread that runs it:
 * four imports of FIFOs held every thread, and the host's own fs calls and dns.lookup with them;
 * a character device (/dev/zero) reads for ever. So files are opened with O_NONBLOCK (a FIFO's
 * open returns at once) and O_NOCTTY, and what was opened is fstat'ed: a device, FIFO or socket
 * is refused even when it was swapped in after a check of the path.
 */
import { constants, type Stats } from 'node:fs'
import fs, { type FileHandle } from 'node:fs/promises'

const { O_RDONLY, O_NONBLOCK, O_NOCTTY, O_NOFOLLOW } = constants

/** What a file that is no regular file is, for a message. */
export function fileKind(st: Stats): string {
  if (st.isDirectory()) return 'a directory'
  if (st.isCharacterDevice()) return 'a character device'
  if (st.isBlockDevice()) return 'a block device'
  if (st.isFIFO()) return 'a FIFO'
  if (st.isSocket()) return 'a socket'
  if (st.isSymbolicLink()) return 'a symbolic link'
  return 'a regular file'
}

export type OpenedFile = { handle: FileHandle; size: number } | { kind: string }

/**
 * `file` opened for reading when it is a regular file, else what it is. With `follow`, a
 * symbolic link as its last component is followed (the kernel resolves it once, and what it
 * names is what the descriptor checks); without, a link is refused.
 */
export async function openRegular(file: string, follow: boolean): Promise<OpenedFile> {
  let handle: FileHandle
  try {
    handle = await fs.open(file, O_RDONLY | O_NONBLOCK | O_NOCTTY | (follow ? 0 : O_NOFOLLOW))
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ELOOP' && !follow) return { kind: 'a symbolic link' }
    // A socket cannot be opened (ENXIO): say what it is.
    if (code === 'ENXIO') {
      const st = await (follow ? fs.stat(file) : fs.lstat(file)).catch(() => null)
      if (st !== null) return { kind: fileKind(st) }
    }
    throw err
  }
  const st = await handle.stat()
  if (st.isFile()) return { handle, size: st.size }
  await handle.close()
  return { kind: fileKind(st) }
}
