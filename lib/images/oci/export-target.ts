/**
 * Where an export writes: a path that must not exist yet, in a directory another local user may
 * be able to write to (/tmp, a shared directory). The directory is opened once (host-dir.ts) and
 * every later step goes through that descriptor, so a directory renamed or a link planted on
 * the way since is never written through. What is made is staged under a name nobody can
 * predict and only then put at the target: a link (a file) or a rename (a directory) that never
 * replaces what is there, so a failed export leaves nothing, not even part of an image.
 */
import fs from 'node:fs'
import path from 'node:path'
import { HostDir } from '../../host-dir.js'
import { hostPathError } from '../../host-path-error.js'
import { describe } from '../../options.js'
import { errors } from '../../protocol/errors.gen.js'

export interface TargetDir {
  /** The target's directory, held open. */
  dir: HostDir
  /** The target's name in it. */
  name: string
  /** The target's absolute path, as the caller gave it. */
  target: string
}

/** Opens the target's directory: S211 when it is missing, S213 when the target exists, S215 when refused. */
export function openTarget(target: string): TargetDir {
  let dir: HostDir
  try {
    // The caller named this directory: a link there is followed once, here, and the directory is held.
    dir = HostDir.open(path.dirname(target), undefined, { follow: true })
  } catch (err) {
    throw hostPathError(err, path.dirname(target))
  }
  const name = path.basename(target)
  let present = true
  try {
    fs.lstatSync(dir.at(name))
  } catch (err) {
    present = false
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') {
      dir.close()
      throw hostPathError(err, target)
    }
  }
  if (present) {
    dir.close()
    throw exists(target)
  }
  return { dir, name, target }
}

export function exists(target: string) {
  return errors.fsExists({
    path: `export target ${describe(target)}`,
    reason: 'already exists (an export never replaces anything)',
  })
}

/** A host error of the target's directory as the caller sees it (exists, denied, missing; else the host's S313). */
export function targetError(err: unknown, target: string) {
  const code = (err as NodeJS.ErrnoException).code
  if (code === 'EEXIST' || code === 'ENOTEMPTY' || code === 'ENOTDIR') return exists(target)
  return hostPathError(err, target)
}
