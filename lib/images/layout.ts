/**
 * Where things live in the image cache:
 *
 *   <cache>/<id>/rootfs/          the root filesystem (immutable once published)
 *   <cache>/<id>/manifest.json    written before publication, so a present manifest means complete
 *   <cache>/names/<name>.json     name → id
 *   <cache>/.locks/<id>/          build lock (owner.json inside)
 *   <cache>/.users/<id>/<sandbox> the process keeping a live sandbox of <id> (users.ts)
 *   <cache>/.tmp-<pid>-<start>-<random>/   a build in progress, renamed to <id> when done
 *   <cache>/.trash-<random>/      an image being deleted
 */
import path from 'node:path'
import { cacheDir } from '../paths.js'

/** `${XDG_CACHE_HOME:-$HOME/.cache}/krunbox/images`. */
export function defaultImageCacheDir(): string {
  return path.join(cacheDir(), 'images')
}

export const ID_PATTERN = /^[0-9a-f]{64}$/
export const TMP_PREFIX = '.tmp-'
export const TRASH_PREFIX = '.trash-'

export class CacheLayout {
  constructor(readonly root: string) {}

  imageDir(id: string): string {
    return path.join(this.root, id)
  }

  rootfs(id: string): string {
    return path.join(this.root, id, 'rootfs')
  }

  manifest(id: string): string {
    return path.join(this.root, id, 'manifest.json')
  }

  get namesDir(): string {
    return path.join(this.root, 'names')
  }

  nameRecord(name: string): string {
    return path.join(this.root, 'names', `${name}.json`)
  }

  get locksDir(): string {
    return path.join(this.root, '.locks')
  }

  lock(key: string): string {
    return path.join(this.root, '.locks', key)
  }

  get usersDir(): string {
    return path.join(this.root, '.users')
  }

  users(id: string): string {
    return path.join(this.root, '.users', id)
  }
}
