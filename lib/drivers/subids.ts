/**
 * Several ids for a host user that is not root. shadow's subordinate ids (/etc/subuid,
 * /etc/subgid; Debian's `uidmap` package) give the user ranges of host ids that its setuid
 * newuidmap and newgidmap may map into a user namespace of the user's, after checking them
 * against those files. The sandbox's id 0 is then the user itself (its primary gid for groups)
 * and ids 1.. are the user's ranges in file order, at most SANDBOX_ID_COUNT ids in all: the same
 * shape as a root host's range, so uid 1000 exists and `chown` works inside.
 *
 * Without a range, a passwd entry (newuidmap needs one) or the two helpers, there is no such
 * mapping and bwrap maps the user alone, as before (a command as another user is S226).
 */
import fsp from 'node:fs/promises'
import os from 'node:os'
import { findExecutable } from '../paths.js'
import { SANDBOX_ID_COUNT } from './idmap.js'

export const SUBUID_FILE = '/etc/subuid'
export const SUBGID_FILE = '/etc/subgid'

/** Older kernels take at most 5 lines per map: the user's own line and 4 ranges. */
const MAX_RANGES = 4
const MAX_ID = 0xffff_ffff

export interface IdRange {
  start: number
  count: number
}

export interface SubordinateMapping {
  /** The host uid the sandbox's root is: the user. */
  hostRoot: number
  /** Kernel map text ("inside outside count" lines), written by the helpers. */
  uidMap: string
  gidMap: string
  /** Absolute paths of newuidmap and newgidmap. */
  helpers: { uid: string; gid: string }
}

/**
 * The ranges `text` (a subuid or subgid file) gives the user `owner`, in file order, as
 * newuidmap reads them (a line names its owner by name or by uid). Malformed lines, empty
 * ranges, ranges past 2^32 - 1, ranges holding `own` (the id mapped to the sandbox's 0) and
 * ranges overlapping an earlier one (a user listed by name and by uid) are left out: the
 * kernel refuses overlapping lines.
 */
export function subordinateRanges(text: string, owner: { name: string | null; uid: number }, own: number): IdRange[] {
  const ranges: IdRange[] = []
  for (const line of text.split('\n')) {
    const fields = line.trim().split(':')
    if (fields.length !== 3 || (fields[0] !== owner.name && fields[0] !== String(owner.uid))) continue
    if (!/^\d{1,10}$/.test(fields[1]!) || !/^\d{1,10}$/.test(fields[2]!)) continue
    const start = Number(fields[1])
    const count = Number(fields[2])
    if (count === 0 || start + count - 1 > MAX_ID) continue
    if (own >= start && own < start + count) continue
    if (ranges.some((r) => start < r.start + r.count && r.start < start + count)) continue
    ranges.push({ start, count })
    if (ranges.length === MAX_RANGES) break
  }
  return ranges
}

/**
 * Map text for the sandbox: 0 is `own`, then `ranges` from sandbox id 1 on, cut at
 * SANDBOX_ID_COUNT ids in all. Null without ranges.
 */
export function subordinateMap(own: number, ranges: IdRange[]): string | null {
  if (ranges.length === 0) return null
  let text = `0 ${own} 1\n`
  let next = 1
  for (const r of ranges) {
    const count = Math.min(r.count, SANDBOX_ID_COUNT - next)
    if (count <= 0) break
    text += `${next} ${r.start} ${count}\n`
    next += count
  }
  return text
}

/** The subordinate mapping of the host user running this process, or null (see the header). */
export async function subordinateIdMapping(): Promise<SubordinateMapping | null> {
  const uid = process.getuid?.()
  const gid = process.getgid?.()
  if (uid === undefined || gid === undefined || uid === 0) return null
  const helpers = { uid: mapHelper('newuidmap'), gid: mapHelper('newgidmap') }
  if (helpers.uid === null || helpers.gid === null) return null
  let name: string
  try {
    name = os.userInfo().username
  } catch {
    return null // no passwd entry: newuidmap would refuse
  }
  const [subuid, subgid] = await Promise.all([readOrEmpty(SUBUID_FILE), readOrEmpty(SUBGID_FILE)])
  const owner = { name, uid }
  const uidMap = subordinateMap(uid, subordinateRanges(subuid, owner, uid))
  const gidMap = subordinateMap(gid, subordinateRanges(subgid, owner, gid))
  if (uidMap === null || gidMap === null) return null
  return { hostRoot: uid, uidMap, gidMap, helpers: { uid: helpers.uid, gid: helpers.gid } }
}

/** On PATH, else in the system directories (a PATH without /usr/bin still has them there). */
function mapHelper(name: string): string | null {
  return findExecutable(name) ?? findExecutable(name, '/usr/bin:/usr/sbin:/bin:/sbin')
}

async function readOrEmpty(file: string): Promise<string> {
  try {
    return await fsp.readFile(file, 'utf8')
  } catch {
    return ''
  }
}
