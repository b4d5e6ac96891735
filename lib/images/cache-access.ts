/**
 * The image cache is its user's alone. A tree keeps /tmp 1777 and /workspace 0777 and its files
 * belong to the sandbox's ids, so anyone who could walk into the cache could plant a file in
 * every later sandbox of an image, or run what an image holds as the sandbox root's host uid.
 * The cache's top directory is therefore owned by this process's uid and 0700 (an older cache
 * made 0755 is tightened at its first use). Sandboxes never walk this path: on a root host the
 * spawner binds the image for them as root (drivers/idmap.ts STAGE_DIR), and without root a
 * sandbox's root is this user.
 */
import fs from 'node:fs/promises'
import path from 'node:path'
import { hostWriteError } from '../host-write-error.js'
import { errors } from '../protocol/errors.gen.js'

export const CACHE_ROOT_MODE = 0o700

/** Creates `root` (0700) or tightens it to 0700; S005 when it belongs to another uid, S313 when the host refuses. */
export async function ownCacheRoot(root: string): Promise<void> {
  const uid = process.getuid?.()
  try {
    await fs.mkdir(path.dirname(root), { recursive: true })
    await fs.mkdir(root, { mode: CACHE_ROOT_MODE }).catch((err: NodeJS.ErrnoException) => {
      if (err.code !== 'EEXIST') throw err
    })
    const st = await fs.stat(root)
    if (!st.isDirectory()) throw errors.badArgument({ subject: `image cache ${root}`, problem: 'is not a directory' })
    if (uid !== undefined && st.uid !== uid)
      throw errors.accessDenied({
        subject: `image cache ${root}`,
        problem: `belongs to uid ${st.uid}, not to this user (uid ${uid}): a cache is one user's, out of every other's reach`,
      })
    // mkdir's mode passed through the umask, and an older cache was made 0755.
    if ((st.mode & 0o7777) !== CACHE_ROOT_MODE) await fs.chmod(root, CACHE_ROOT_MODE)
  } catch (err) {
    throw hostWriteError(err, root) ?? err
  }
}
