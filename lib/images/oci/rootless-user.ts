/**
 * On a host user that is not root, a sandbox maps ids beyond its root only through the user's
 * subordinate ids (drivers/subids.ts). An OCI image whose User is not root cannot run a single
 * command without them: create says so, naming the user and the fix, instead of S226 at each
 * command.
 */
import os from 'node:os'
import { SUBGID_FILE, SUBUID_FILE, subordinateIdMapping } from '../../drivers/subids.js'
import { findExecutable } from '../../paths.js'
import type { ImageManifest } from '../types.js'
import { errors } from '../../protocol/errors.gen.js'

/** How many sandbox ids a map text ("inside outside count" lines) covers from 0. */
function mappedCount(map: string): number {
  return map
    .trim()
    .split('\n')
    .reduce((sum, line) => sum + Number(line.trim().split(/\s+/)[2] ?? 0), 0)
}

/**
 * Throws S226 when the image's User (with no create({ user }) over it) has an id a sandbox of
 * this host user will not map. Asked only for a driver whose sandbox ids are host ids
 * (DriverCapabilities.hostIdsFromSubordinates).
 */
export async function assertImageUserMapped(
  image: string,
  manifest: ImageManifest,
  user: string | undefined,
): Promise<void> {
  const spec = manifest.oci?.userSpec
  if (user !== undefined || spec == null || process.getuid?.() === 0) return
  const [uid, gid] = spec.split(':').map(Number)
  if (uid === 0 && gid === 0) return
  const mapping = await subordinateIdMapping()
  const highest = Math.max(uid, gid)
  if (mapping !== null && highest < Math.min(mappedCount(mapping.uidMap), mappedCount(mapping.gidMap))) return
  let name = String(process.getuid?.())
  try {
    name = os.userInfo().username
  } catch {}
  const found = (helper: string) =>
    (findExecutable(helper) ?? findExecutable(helper, '/usr/bin:/usr/sbin:/bin:/sbin')) !== null
  const helpers = found('newuidmap') && found('newgidmap')
  const fix =
    mapping !== null
      ? `host user ${name}'s subordinate ranges give the sandbox ${Math.min(mappedCount(mapping.uidMap), mappedCount(mapping.gidMap))} ids, not ${highest + 1}: make its lines in ${SUBUID_FILE} and ${SUBGID_FILE} 65536 ids long`
      : !helpers
        ? `newuidmap and newgidmap (apt-get install uidmap) are needed to give host user ${name}'s subordinate ids to a sandbox`
        : `host user ${name} has no subordinate ids: add a line "${name}:<first id>:65536" (a range no other user has) to ${SUBUID_FILE} and to ${SUBGID_FILE}`
  throw errors.userNotMapped({
    user: manifest.oci?.config.user ?? spec,
    id: String(highest),
    mapFile: `it is the User of image ${image}; ${fix}; or create({ user: '0' }) to run as root`,
  })
}
