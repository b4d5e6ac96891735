/**
 * The host's own writes (the state directory, records, control sockets, cgroups) fail for reasons
 * of the machine, not of krunbox: a full or read-only filesystem, a quota, permissions, a path
 * too long, no fds left. Those are S313 naming the path and the system's reason, which the caller
 * can act on, never S500 "a bug".
 */
import { SandboxError } from './errors.js'
import { errors } from './protocol/errors.gen.js'

/** A filesystem's or the system's refusal of a write (the native writers' S313 has the same cases and more). */
const REFUSALS = new Set([
  'ENOSPC',
  'EDQUOT',
  'EROFS',
  'EACCES',
  'EPERM',
  'ENAMETOOLONG',
  'EMFILE',
  'ENFILE',
  'EIO',
  'EEXIST',
  'ELOOP',
  'ENOTDIR',
  'EMLINK',
])

/**
 * err as S313 when it is a filesystem's refusal of a host write (`path`: what was written, when the
 * error names no path); null for anything else (a SandboxError already, a connection's error...).
 */
export function hostWriteError(err: unknown, path: string): SandboxError | null {
  if (err instanceof SandboxError || typeof err !== 'object' || err === null) return null
  const e = err as NodeJS.ErrnoException
  if (typeof e.code !== 'string' || !REFUSALS.has(e.code)) return null
  const file = typeof e.path === 'string' ? e.path : path
  const reason = `${e.syscall ?? 'write'} failed: ${e.code} (${systemMessage(e)})`
  return errors.hostWriteFailed(
    { path: file, reason },
    { cause: err, details: { path: file, errnoName: e.code, ...(e.syscall && { syscall: e.syscall }) } },
  )
}

/** "no space left on device" out of Node's "ENOSPC: no space left on device, write '…'". */
function systemMessage(e: NodeJS.ErrnoException): string {
  const m = /^[A-Z0-9]+: ([^,]+)/.exec(e.message)
  return m ? m[1] : e.code!
}

/** Runs a host write; its system error rethrown as S313 naming `path`. */
export async function hostWrite<T>(path: string, write: () => Promise<T>): Promise<T> {
  try {
    return await write()
  } catch (err) {
    throw hostWriteError(err, path) ?? err
  }
}

/** hostWrite for a synchronous write. */
export function hostWriteSync<T>(path: string, write: () => T): T {
  try {
    return write()
  } catch (err) {
    throw hostWriteError(err, path) ?? err
  }
}
