/**
 * Looking at a root filesystem from the host. Symlinks inside an image are meant to be read
 * with the image as `/`: an absolute link such as /bin/sh -> /usr/bin/busybox must resolve
 * inside the image, never on the host (which, as root, would also let a crafted image make
 * us write host files).
 */
import fs from 'node:fs/promises'
import path from 'node:path'

const MAX_LINK_HOPS = 40

/**
 * Resolves `inner` (an absolute path inside the image) to a host path below `root`,
 * following symlinks as if `root` were `/`. Missing components are kept as they are.
 * With followLast false, a symlink in the last component is not followed.
 */
export async function resolveInRoot(root: string, inner: string, followLast = true): Promise<string> {
  const pending = inner.split('/').filter((c) => c !== '' && c !== '.')
  const resolved: string[] = []
  let hops = 0
  while (pending.length > 0) {
    const part = pending.shift() as string
    if (part === '..') {
      resolved.pop()
      continue
    }
    const candidate = path.join(root, ...resolved, part)
    const stat = await fs.lstat(candidate).catch(() => null)
    if (stat === null) {
      resolved.push(part, ...pending.filter((c) => c !== '..'))
      break
    }
    if (stat.isSymbolicLink() && (pending.length > 0 || followLast)) {
      if (++hops > MAX_LINK_HOPS)
        throw Object.assign(new Error(`too many symlinks resolving ${inner}`), { code: 'ELOOP' })
      const target = await fs.readlink(candidate)
      if (target.startsWith('/')) resolved.length = 0
      pending.unshift(...target.split('/').filter((c) => c !== '' && c !== '.'))
      continue
    }
    resolved.push(part)
  }
  return path.join(root, ...resolved)
}

export async function statInRoot(root: string, inner: string): Promise<import('node:fs').Stats | null> {
  return fs.stat(await resolveInRoot(root, inner)).catch(() => null)
}

/** A root filesystem has a shell (/bin/sh or /usr/bin/sh), or at least /bin and /etc. */
/**
 * Why a tree that is not a root filesystem was refused: an OCI image layout or a `docker save`
 * archive is an image to import, not a tree to copy (said so, with the call to make).
 */
export async function notRootfsProblem(root: string): Promise<string> {
  const plain = 'is not a root filesystem (no /bin/sh or /usr/bin/sh, nor /bin and /etc)'
  const has = async (name: string) => (await statInRoot(root, `/${name}`))?.isFile() === true
  if ((await has('oci-layout')) || (await has('manifest.json')))
    return `${plain}: it is an OCI image layout or a docker save archive; import it with rt.images.import(path, { name }) (krunbox images import)`
  return plain
}

export async function looksLikeRootfs(root: string): Promise<boolean> {
  for (const shell of ['/bin/sh', '/usr/bin/sh']) {
    const stat = await statInRoot(root, shell)
    if (stat?.isFile()) return true
  }
  const bin = await statInRoot(root, '/bin')
  const etc = await statInRoot(root, '/etc')
  return Boolean(bin?.isDirectory() && etc?.isDirectory())
}

/**
 * Removes what a tree must not hold on the host, wherever it came from: device nodes (sandboxes
 * get their own /dev, and one smuggled into a custom image must not reach a sandbox) and the
 * setuid/setgid bits of every entry but directories (on the host such a file runs as its owner,
 * a real host user or the sandbox root's host uid, for anyone who can reach it; inside a sandbox
 * the bits grant nothing, every command runs with no_new_privs). A directory's setgid only
 * picks the group of new entries: it stays.
 */
export async function dropHostHazards(root: string): Promise<void> {
  const walk = async (dir: string): Promise<void> => {
    const entries = await fs.readdir(dir, { withFileTypes: true })
    for (const entry of entries) {
      const abs = path.join(dir, entry.name)
      if (entry.isDirectory()) await walk(abs)
      else if (entry.isCharacterDevice() || entry.isBlockDevice()) await fs.rm(abs, { force: true })
      else if (!entry.isSymbolicLink()) {
        const { mode } = await fs.lstat(abs)
        if ((mode & 0o6000) !== 0) await fs.chmod(abs, mode & 0o1777)
      }
    }
  }
  await walk(root)
}
