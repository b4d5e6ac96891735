/** What a failed operation on a host path (an upload's source, a download's destination) is to the caller. */
import { SandboxError } from './errors.js'
import { describe } from './options.js'
import { errors } from './protocol/errors.gen.js'

/** The errno as a stable code (S211 not found, S212 a directory, S213 exists, S215 denied, else S210), naming the path. */
export function hostPathError(err: unknown, file: string): SandboxError {
  const code = (err as NodeJS.ErrnoException).code
  const why = (err as Error).message
  if (code === 'ENOENT' || code === 'ENOTDIR')
    return errors.fsNotFound({ path: `local path ${describe(file)}`, reason: `not found (${code})` }, { cause: err })
  if (code === 'EISDIR')
    return errors.fsWrongType({ path: `local path ${describe(file)}`, reason: 'is a directory' }, { cause: err })
  if (code === 'EEXIST')
    return errors.fsExists(
      { path: `local path ${describe(file)}`, reason: 'already exists and is not a directory' },
      { cause: err },
    )
  if (code === 'EACCES' || code === 'EPERM')
    return errors.fsDenied(
      { path: `local path ${describe(file)}`, reason: 'permission denied on the host' },
      { cause: err },
    )
  return errors.fsBadRequest({ path: `local path ${describe(file)}`, reason: why }, { cause: err })
}
