/**
 * Which images live sandboxes run on, for every process and runtime sharing one cache: prune
 * and remove never delete one of them (its files would go under the sandbox, whose next
 * `exec sh` would find no sh).
 *
 *   <cache>/.users/<image id>/<sandbox id>   "pid start": the process that keeps the sandbox
 *   <cache>/.users/<image id>/.pruning       a prune is deciding on the image (under its lock)
 *
 * A mark names its creating process while the sandbox boots, then the sandbox's own process,
 * which a detached sandbox outlives its creator with. A mark whose process is gone (pid and
 * start time, liveness.ts) is stale and holds nothing.
 *
 * No lock on a create's path (concurrent creates of one image would queue on it): a create
 * writes its mark, then looks for the image and for `.pruning`. A prune, under the image's lock,
 * finds no live mark, writes `.pruning`, and looks for live marks again before it deletes: a mark
 * written before that second look keeps the image, and a create that wrote its mark after it
 * sees `.pruning` and waits for the prune's lock before it looks again.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs/promises'
import path from 'node:path'
import { ID_PATTERN, type CacheLayout } from './layout.js'
import { isProcessAlive, selfIdentity, type ProcessIdentity } from './liveness.js'
import { acquireLock } from './lock.js'

const PRUNING = '.pruning'

/** A live sandbox's hold on its image. */
export interface ImageUse {
  /** From now on the sandbox's process holds the image (its creator may exit). */
  heldBy(pid: number, start: string): Promise<void>
  /** The sandbox ended. */
  release(): Promise<void>
}

async function writeMark(file: string, owner: ProcessIdentity): Promise<void> {
  // Renamed into place: a reader never takes a half-written mark for a stale one.
  const staging = path.join(path.dirname(file), `.${path.basename(file)}.${randomBytes(4).toString('hex')}`)
  await fs.writeFile(staging, `${owner.pid} ${owner.start ?? 'x'}`)
  await fs.rename(staging, file)
}

const exists = (file: string) =>
  fs.stat(file).then(
    () => true,
    () => false,
  )

/** Marks image `id` as used by sandbox `sandboxId` on behalf of this process; null when the image is gone. */
export async function useImage(layout: CacheLayout, id: string, sandboxId: string): Promise<ImageUse | null> {
  const dir = layout.users(id)
  const mark = path.join(dir, sandboxId)
  const use: ImageUse = {
    heldBy: (pid, start) => writeMark(mark, { pid, start }),
    release: () => fs.rm(mark, { force: true }),
  }
  try {
    await fs.mkdir(dir, { recursive: true })
    await writeMark(mark, selfIdentity())
  } catch (err) {
    // The image's marks went with the image.
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
    throw err
  }
  if (!(await exists(path.join(dir, PRUNING))) && (await exists(layout.manifest(id)))) return use
  // A prune is deciding on it: once the prune's lock is free, it has kept the image (and seen
  // this mark) or deleted it. A `.pruning` met under the lock is a dead prune's.
  const lock = await acquireLock(layout.lock(id))
  try {
    await fs.rm(path.join(dir, PRUNING), { force: true })
    if (await exists(layout.manifest(id))) return use
  } finally {
    await lock.release()
  }
  await use.release()
  return null
}

/** The sandboxes whose process still holds image `id`; stale marks are removed. */
async function liveUsers(layout: CacheLayout, id: string): Promise<string[]> {
  const dir = layout.users(id)
  const live: string[] = []
  for (const sandboxId of await fs.readdir(dir).catch(() => [] as string[])) {
    if (sandboxId.startsWith('.')) continue
    const file = path.join(dir, sandboxId)
    const [pid, start] = (await fs.readFile(file, 'utf8').catch(() => '')).split(' ')
    if (isProcessAlive({ pid: Number(pid), start: start === 'x' ? null : (start ?? '') })) live.push(sandboxId)
    else await fs.rm(file, { force: true })
  }
  return live
}

/**
 * Runs `remove` (the image's deletion) unless a live sandbox uses image `id`, and then removes
 * its marks. The caller holds the image's lock. Returns what `remove` did, or false.
 */
export async function removeUnlessUsed(
  layout: CacheLayout,
  id: string,
  remove: () => Promise<boolean>,
): Promise<boolean> {
  const dir = layout.users(id)
  if ((await liveUsers(layout, id)).length > 0) return false
  await fs.mkdir(dir, { recursive: true })
  await fs.writeFile(path.join(dir, PRUNING), '')
  try {
    if ((await liveUsers(layout, id)).length > 0) return false
    const removed = await remove()
    if (removed) await fs.rm(dir, { recursive: true, force: true })
    return removed
  } finally {
    await fs.rm(path.join(dir, PRUNING), { force: true })
  }
}

/** Removes stale marks, and the marks of images no longer in the cache (a host that died left them). */
export async function sweepUsers(layout: CacheLayout): Promise<void> {
  for (const id of await fs.readdir(layout.usersDir).catch(() => [] as string[])) {
    if (!ID_PATTERN.test(id)) continue
    const lock = await acquireLock(layout.lock(id))
    try {
      if (await exists(layout.manifest(id))) await liveUsers(layout, id)
      else await fs.rm(layout.users(id), { recursive: true, force: true })
    } finally {
      await lock.release()
    }
  }
}
