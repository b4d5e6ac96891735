/**
 * A host directory that another local user may be able to write to (a shared `to`, a download's
 * destination), held open by a descriptor. Node has no openat/renameat, so names are resolved
 * through /proc/self/fd/<fd>/<name>: the magic link is the directory we opened, whatever has been
 * renamed or linked in its place since, and only the last component is looked up by name.
 * Files are created fresh (O_CREAT|O_EXCL|O_NOFOLLOW) under a name nobody can predict, and
 * renamed or linked within the directory, so no link another user plants is ever written through.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'

const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_NOFOLLOW, O_DIRECTORY, O_NONBLOCK } = fs.constants

/** What a directory was when it was chosen: a later open must find the same one. */
export interface DirIdentity {
  dev: number
  ino: number
}

export class HostDir {
  readonly path: string
  readonly fd: number

  private constructor(dir: string, fd: number) {
    this.path = dir
    this.fd = fd
  }

  /**
   * Opens dir, never through a symlink as its last component unless `follow`; with `same`, it must be that
   * directory (a parent swapped for a link since is refused). Throws the errno error.
   */
  static open(dir: string, same?: DirIdentity, { follow = false } = {}): HostDir {
    // follow: the caller named this directory (a download's destination); it is bound once, here.
    const fd = fs.openSync(dir, O_RDONLY | O_DIRECTORY | O_NONBLOCK | (follow ? 0 : O_NOFOLLOW))
    try {
      const st = fs.fstatSync(fd)
      if (same && (st.dev !== same.dev || st.ino !== same.ino)) {
        throw Object.assign(
          new Error(
            `${dir} is no longer the directory it was when chosen (replaced or reached through a swapped link)`,
          ),
          { code: 'ESTALE' },
        )
      }
      return new HostDir(dir, fd)
    } catch (err) {
      fs.closeSync(fd)
      throw err
    }
  }

  /** The path of name inside this very directory (name is one component). */
  at(name: string): string {
    if (name.length === 0 || name.includes('/') || name === '.' || name === '..')
      throw new Error(`${JSON.stringify(name)} is not a single file name`)
    return `/proc/self/fd/${this.fd}/${name}`
  }

  /** A fresh file `.<base>.<random>.tmp`, open for writing; nothing that existed is ever opened. */
  createTemp(base: string, mode = 0o600): { name: string; fd: number } {
    const name = `.${base}.${crypto.randomBytes(8).toString('hex')}.tmp`
    return { name, fd: fs.openSync(this.at(name), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode) }
  }

  /** rename(2) within the directory: replaces what is at `to` (a link there is replaced, not followed). */
  rename(from: string, to: string): void {
    fs.renameSync(this.at(from), this.at(to))
  }

  /** link(2) within the directory: EEXIST if `to` exists, which then stays as it is. */
  link(from: string, to: string): void {
    fs.linkSync(this.at(from), this.at(to))
  }

  unlink(name: string): void {
    try {
      fs.unlinkSync(this.at(name))
    } catch {}
  }

  close(): void {
    try {
      fs.closeSync(this.fd)
    } catch {}
  }
}
