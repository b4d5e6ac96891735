/**
 * Host owners back to the ids a sandbox sees. The image cache and the snapshot store keep a
 * sandbox's files under the host ids its user namespace maps them to: on a root host sandbox id
 * n is SANDBOX_ID_BASE + n (drivers/idmap.ts); without root, 0 is the user and 1.. the user's
 * subordinate ids when it has them (drivers/subids.ts). An exported image holds the ids as the
 * sandbox saw them: a file of the sandbox's root is uid 0, one of its uid 1000 is 1000, and a host
 * id the sandbox does not map is the overflow id (65534) there and in the image.
 */
import { sandboxIdMapping } from '../../drivers/idmap.js'
import { subordinateIdMapping } from '../../drivers/subids.js'

export const OVERFLOW_ID = 65534

export interface SandboxIds {
  uid(hostUid: number): number
  gid(hostGid: number): number
}

/** The reverse of the maps this host's sandboxes get. */
export async function sandboxIds(): Promise<SandboxIds> {
  const root = sandboxIdMapping()
  const rootless = root === null ? await subordinateIdMapping() : null
  const uidMap = root?.uidMap ?? rootless?.uidMap ?? `0 ${process.getuid?.() ?? 0} 1`
  const gidMap = root?.gidMap ?? rootless?.gidMap ?? `0 ${process.getgid?.() ?? 0} 1`
  return { uid: reverse(uidMap), gid: reverse(gidMap) }
}

/** "inside outside count" lines read backwards: host id to sandbox id. */
export function reverse(map: string): (hostId: number) => number {
  const lines = map
    .trim()
    .split('\n')
    .map((line) => line.trim().split(/\s+/).map(Number) as [number, number, number])
  return (hostId) => {
    for (const [inside, outside, count] of lines)
      if (hostId >= outside && hostId < outside + count) return inside + (hostId - outside)
    return OVERFLOW_ID
  }
}
