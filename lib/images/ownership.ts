/**
 * Image files as the sandbox's ids own them. On a root host a sandbox's ids are a range of
 * unprivileged host ids (drivers/idmap.ts), so an image extracted as root would look owned by
 * nobody inside, and overlayfs could not copy a root-owned directory up for a write. Shifting
 * every entry's uid and gid by the range's base once makes the image owned, inside, by the
 * same users as in the archive. Docker's userns-remap keeps its layers the same way.
 */
import fs from 'node:fs/promises'
import path from 'node:path'

/**
 * Shifts ownership of `rootfs` into [base, base + count). Idempotent and safe to run twice at
 * once: an entry already in the range is left alone, and the root directory is shifted last,
 * so a shifted root means a shifted tree (an interrupted run is simply redone).
 */
export async function ownByIdRange(rootfs: string, base: number, count: number): Promise<void> {
  const root = await fs.lstat(rootfs)
  if (inRange(root.uid, base, count) && inRange(root.gid, base, count)) return
  await shiftTree(rootfs, base, count)
}

function inRange(id: number, base: number, count: number): boolean {
  return id >= base && id < base + count
}

async function shiftTree(dir: string, base: number, count: number): Promise<void> {
  const entries = await fs.readdir(dir, { withFileTypes: true })
  for (const entry of entries) {
    const file = path.join(dir, entry.name)
    if (entry.isDirectory()) await shiftTree(file, base, count)
    else await shiftEntry(file, base, count)
  }
  await shiftEntry(dir, base, count)
}

async function shiftEntry(file: string, base: number, count: number): Promise<void> {
  const st = await fs.lstat(file)
  const uid = inRange(st.uid, base, count) ? st.uid : base + Math.min(st.uid, count - 1)
  const gid = inRange(st.gid, base, count) ? st.gid : base + Math.min(st.gid, count - 1)
  if (uid === st.uid && gid === st.gid) return
  // chown clears setuid/setgid bits, and they stay cleared: such a file of the sandbox's root
  // would run as that host uid for anyone reaching it (trees are published without them, see
  // rootfs.ts dropHostHazards; inside a sandbox they grant nothing).
  await fs.lchown(file, uid, gid)
}
