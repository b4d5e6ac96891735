/**
 * Which host ids a sandbox's ids are. On a root host, sandbox uid (and gid) n is host id
 * SANDBOX_ID_BASE + n for n below SANDBOX_ID_COUNT, so the sandbox's root is an unprivileged
 * nobody on the host: a root-owned sysctl, a host file or a host process is out of its reach by
 * plain permission. Without root, the sandbox's root is the host user (bwrap maps it) and this
 * module has nothing to do.
 */
import fsp from 'node:fs/promises'
import { ownByIdRange } from '../images/ownership.js'

export const SANDBOX_ID_BASE = 1_000_000_000
export const SANDBOX_ID_COUNT = 65_536

export interface IdMapping {
  /** The host uid (and gid) that the sandbox's root is. */
  hostRoot: number
  /** Kernel map text for /proc/<pid>/uid_map and gid_map. */
  uidMap: string
  gidMap: string
}

export function sandboxIdMapping(): IdMapping | null {
  if (process.getuid?.() !== 0) return null
  const line = `0 ${SANDBOX_ID_BASE} ${SANDBOX_ID_COUNT}\n`
  return { hostRoot: SANDBOX_ID_BASE, uidMap: line, gidMap: line }
}

/**
 * Where the spawner stages the paths a sandbox process needs (native spawn's stagedBinds):
 * a directory every host has, over which a private tmpfs hides the host's own only from that
 * process. On a root host the sandbox's ids could not reach these paths where they are
 * (~/.cache under a 0700 /root, the 0700 state directory).
 */
export const STAGE_DIR = '/mnt'

/** The paths `sources` get when staged, in order. */
export function stagedPaths(count: number): string[] {
  return Array.from({ length: count }, (_, i) => `${STAGE_DIR}/${i}`)
}

/** The spawner's stagedBinds for `sources`, and the path each gets (in order). */
export function stageBinds(sources: string[]): { binds: { dir: string; sources: string[] }; paths: string[] } {
  return { binds: { dir: STAGE_DIR, sources }, paths: stagedPaths(sources.length) }
}

/**
 * On a root host, hands a sandbox's ids what every driver shares with it: the image (shifted
 * into the range once, see images/ownership.ts) and the control directory it writes.
 */
export async function ownForSandboxIds(mapping: IdMapping, imageRootfs: string, controlDir: string): Promise<void> {
  await Promise.all([ownByIdRange(imageRootfs, mapping.hostRoot, SANDBOX_ID_COUNT), fsp.chown(controlDir, mapping.hostRoot, mapping.hostRoot)])
}
