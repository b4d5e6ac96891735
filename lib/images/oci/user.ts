/**
 * An image's `User` (name, uid, name:group, uid:gid...) as the numeric "uid:gid" the agent
 * takes, looked up in the image's own /etc/passwd and /etc/group, read with the image as `/`.
 */
import fs from 'node:fs/promises'
import { resolveInRoot } from '../rootfs.js'

async function table(rootfs: string, file: string): Promise<string[][]> {
  const text = await fs.readFile(await resolveInRoot(rootfs, file), 'utf8').catch(() => '')
  return text
    .split('\n')
    .filter((l) => l !== '' && !l.startsWith('#'))
    .map((l) => l.split(':'))
}

const NUMBER = /^\d{1,10}$/

/** "uid:gid" for the image's User, or null when it names a user or group the image lacks. */
export async function numericUser(rootfs: string, user: string): Promise<string | null> {
  const [userPart, groupPart] = user.split(':', 2)
  let uid: string
  let gid: string | null = null
  if (NUMBER.test(userPart)) {
    uid = userPart
    gid = (await table(rootfs, '/etc/passwd')).find((f) => f[2] === userPart)?.[3] ?? userPart
  } else {
    const entry = (await table(rootfs, '/etc/passwd')).find((f) => f[0] === userPart)
    if (entry === undefined || !NUMBER.test(entry[2] ?? '')) return null
    uid = entry[2]
    gid = entry[3] ?? uid
  }
  if (groupPart !== undefined && groupPart !== '') {
    if (NUMBER.test(groupPart)) gid = groupPart
    else {
      const group = (await table(rootfs, '/etc/group')).find((f) => f[0] === groupPart)
      if (group === undefined || !NUMBER.test(group[2] ?? '')) return null
      gid = group[2]
    }
  }
  return NUMBER.test(gid ?? '') ? `${uid}:${gid}` : null
}
