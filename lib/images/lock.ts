/**
 * An exclusive lock between processes, without flock: the lock is a directory holding
 * owner.json. It is taken by renaming a fully written private directory onto the lock path
 * (rename fails when the target is a non-empty directory), so a lock never exists without its
 * owner. A lock whose owner process is gone is broken and taken over.
 *
 * The lock only avoids duplicate work: images are published by an atomic rename that refuses
 * to replace an existing image, so even a lock broken wrongly cannot corrupt the cache.
 */
import fs from 'node:fs/promises'
import path from 'node:path'
import { randomBytes } from 'node:crypto'
import { isProcessAlive, selfIdentity, type ProcessIdentity } from './liveness.js'
import { errors } from '../protocol/errors.gen.js'

export interface LockOwner extends ProcessIdentity {
  acquiredAt: string
}

export interface LockOptions {
  /** Give up after this long (S102). Default 15 minutes: a cold build of the largest preset takes under one. */
  timeoutMs?: number
  pollMs?: number
  /** Called once when the lock is held by someone else and this process starts waiting. */
  onWait?: (owner: LockOwner | null) => void
}

export interface HeldLock {
  release(): Promise<void>
}

const suffix = () => `${process.pid}-${randomBytes(4).toString('hex')}`

export async function readLockOwner(lockPath: string): Promise<LockOwner | null> {
  try {
    return JSON.parse(await fs.readFile(path.join(lockPath, 'owner.json'), 'utf8')) as LockOwner
  } catch {
    return null
  }
}

function sameOwner(a: LockOwner | null, b: LockOwner | null): boolean {
  return a !== null && b !== null && a.pid === b.pid && a.start === b.start && a.acquiredAt === b.acquiredAt
}

async function tryTake(lockPath: string): Promise<boolean> {
  const staging = `${lockPath}.new-${suffix()}`
  await fs.mkdir(staging, { recursive: true })
  const owner: LockOwner = { ...selfIdentity(), acquiredAt: new Date().toISOString() }
  await fs.writeFile(path.join(staging, 'owner.json'), JSON.stringify(owner))
  try {
    await fs.rename(staging, lockPath)
    return true
  } catch (err) {
    await fs.rm(staging, { recursive: true, force: true })
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOTEMPTY' || code === 'EEXIST') return false
    throw err
  }
}

/** Moves a dead owner's lock aside; puts it back if it turned out to belong to someone alive. */
async function breakStaleLock(lockPath: string, stale: LockOwner): Promise<void> {
  const aside = `${lockPath}.stale-${suffix()}`
  try {
    await fs.rename(lockPath, aside)
  } catch {
    return // already gone or taken over by another waiter
  }
  const moved = await readLockOwner(aside)
  if (!sameOwner(moved, stale) && moved !== null && isProcessAlive(moved)) {
    // Another waiter broke the stale lock and took it between our read and our rename.
    await fs.rename(aside, lockPath).catch(() => undefined)
    return
  }
  await fs.rm(aside, { recursive: true, force: true })
}

export async function acquireLock(lockPath: string, options: LockOptions = {}): Promise<HeldLock> {
  const timeoutMs = options.timeoutMs ?? 15 * 60_000
  const pollMs = options.pollMs ?? 150
  const deadline = Date.now() + timeoutMs
  await fs.mkdir(path.dirname(lockPath), { recursive: true })
  let waiting = false
  for (;;) {
    if (await tryTake(lockPath)) return { release: () => releaseLock(lockPath) }
    const owner = await readLockOwner(lockPath)
    if (owner !== null && !isProcessAlive(owner)) {
      await breakStaleLock(lockPath, owner)
      continue
    }
    if (owner === null) {
      // Being released right now, or a foreign directory: treat an ownerless lock as stale after a grace period.
      const stat = await fs.stat(lockPath).catch(() => null)
      if (stat !== null && Date.now() - stat.mtimeMs > 30_000) {
        await fs.rm(lockPath, { recursive: true, force: true })
        continue
      }
    }
    if (!waiting) {
      waiting = true
      options.onWait?.(owner)
    }
    if (Date.now() > deadline) {
      throw errors.imageBuildFailed({
        subject: `the build lock ${lockPath}`,
        problem: `stayed held by pid ${owner?.pid ?? 'unknown'}: timed out after ${timeoutMs} ms waiting for it`,
      })
    }
    await new Promise((resolve) => setTimeout(resolve, pollMs))
  }
}

async function releaseLock(lockPath: string): Promise<void> {
  const aside = `${lockPath}.released-${suffix()}`
  const owner = await readLockOwner(lockPath)
  const self = selfIdentity()
  // Never release a lock that someone else holds (ours may have been broken as stale).
  if (owner === null || owner.pid !== self.pid || owner.start !== self.start) return
  try {
    await fs.rename(lockPath, aside)
  } catch {
    return
  }
  await fs.rm(aside, { recursive: true, force: true })
}

/** Removes locks of dead owners and leftovers (staging/aside directories) of dead processes. */
export async function sweepLockLeftovers(locksDir: string): Promise<void> {
  const entries = await fs.readdir(locksDir).catch(() => [] as string[])
  for (const entry of entries) {
    const m = /\.(new|stale|released)-(\d+)-[0-9a-f]+$/.exec(entry)
    if (m === null) {
      const owner = await readLockOwner(path.join(locksDir, entry))
      if (owner !== null && !isProcessAlive(owner)) await breakStaleLock(path.join(locksDir, entry), owner)
      continue
    }
    if (m[1] === 'new' && isProcessAlive({ pid: Number(m[2]), start: null })) continue
    await fs.rm(path.join(locksDir, entry), { recursive: true, force: true })
  }
}
