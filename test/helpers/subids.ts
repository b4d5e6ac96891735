/**
 * Gives a host user subordinate ids for the length of a test: a line in /etc/subuid and one in
 * /etc/subgid, added under shadow's own lock (/etc/subuid.lock, taken the way shadow's tools take
 * it, so usermod and a concurrent test wait) and removed in a finally that puts both files back
 * byte for byte (or removes them if they did not exist). Root only.
 */
import fs from 'node:fs'
import { setTimeout as delay } from 'node:timers/promises'
import { SANDBOX_ID_BASE, SANDBOX_ID_COUNT } from '../../lib/drivers/idmap.js'
import { SUBGID_FILE, SUBUID_FILE } from '../../lib/drivers/subids.js'

const FILES = [SUBUID_FILE, SUBGID_FILE]
const LOCK_WAIT_MS = 60_000

/** The lock shadow's tools use: a file with our pid, hard-linked to <file>.lock. */
async function lock(file: string): Promise<() => void> {
  const mine = `${file}.${process.pid}`
  const lockFile = `${file}.lock`
  fs.writeFileSync(mine, String(process.pid))
  try {
    const deadline = Date.now() + LOCK_WAIT_MS
    for (;;) {
      try {
        fs.linkSync(mine, lockFile)
        return () => fs.rmSync(lockFile, { force: true })
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
      }
      // A lock whose holder is gone is stale (shadow removes those too).
      const holder = Number(fs.readFileSync(lockFile, 'utf8').trim())
      if (!Number.isInteger(holder) || holder <= 0 || !fs.existsSync(`/proc/${holder}`)) {
        fs.rmSync(lockFile, { force: true })
        continue
      }
      if (Date.now() > deadline) throw new Error(`${lockFile} is held by pid ${holder} for over ${LOCK_WAIT_MS} ms`)
      await delay(100) // another process's lock: nothing to wait on but its removal
    }
  } finally {
    fs.rmSync(mine, { force: true })
  }
}

interface Saved {
  file: string
  content: Buffer | null
  mode: number
}

function save(file: string): Saved {
  try {
    return { file, content: fs.readFileSync(file), mode: fs.statSync(file).mode & 0o7777 }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err
    return { file, content: null, mode: 0o644 }
  }
}

/** Replaces a file's content through a temporary name and a rename (no reader sees half of it). */
function replace(file: string, content: Buffer, mode: number): void {
  const temp = `${file}.kb-${process.pid}`
  fs.writeFileSync(temp, content, { mode })
  fs.chmodSync(temp, mode)
  fs.renameSync(temp, file)
}

function restore(s: Saved): void {
  if (s.content === null) fs.rmSync(s.file, { force: true })
  else replace(s.file, s.content, s.mode)
  const now = s.content === null ? null : fs.readFileSync(s.file)
  if (s.content === null ? fs.existsSync(s.file) : !now!.equals(s.content))
    throw new Error(`${s.file} was not restored byte for byte`)
}

/** Host ids listed in the files: a new range must not meet them, nor a root host's sandbox range. */
function takenRanges(saved: Saved[]): [number, number][] {
  const taken: [number, number][] = [[SANDBOX_ID_BASE, SANDBOX_ID_BASE + SANDBOX_ID_COUNT]]
  for (const s of saved) {
    for (const line of (s.content?.toString('utf8') ?? '').split('\n')) {
      const [, start, count] = line.split(':')
      if (start && count && /^\d+$/.test(start) && /^\d+$/.test(count))
        taken.push([Number(start), Number(start) + Number(count)])
    }
  }
  return taken
}

function freeRange(saved: Saved[], count: number): number {
  const taken = takenRanges(saved)
  for (let start = 1_100_000_000; start + count < 0xffff_ffff; start += count) {
    if (taken.every(([from, to]) => start + count <= from || to <= start)) return start
  }
  throw new Error('no free range of host ids for the subordinate ids')
}

/** Holds shadow's locks on both files for as long as `fn` runs; gives it their content. */
export async function holdingSubordinateIdFiles<T>(
  fn: (current: { subuid: string; subgid: string }) => Promise<T>,
): Promise<T> {
  const unlock: (() => void)[] = []
  try {
    for (const file of FILES) unlock.push(await lock(file))
    const [uid, gid] = FILES.map(save)
    return await fn({ subuid: uid!.content?.toString('utf8') ?? '', subgid: gid!.content?.toString('utf8') ?? '' })
  } finally {
    for (const release of unlock.reverse()) release()
  }
}

/**
 * Runs `fn` while `user` has `count` subordinate uids and gids (one fresh range, the same for
 * both, outside every listed range and the root host's sandbox range); passes its start.
 */
export async function withSubordinateIds<T>(
  user: string,
  count: number,
  fn: (start: number) => Promise<T>,
): Promise<T> {
  return holdingSubordinateIdFiles(async () => {
    const saved = FILES.map(save)
    const start = freeRange(saved, count)
    try {
      for (const s of saved) {
        const before = s.content ?? Buffer.alloc(0)
        const separator = before.length > 0 && before[before.length - 1] !== 0x0a ? '\n' : ''
        replace(s.file, Buffer.concat([before, Buffer.from(`${separator}${user}:${start}:${count}\n`)]), s.mode)
      }
      return await fn(start)
    } finally {
      for (const s of saved) restore(s)
    }
  })
}
