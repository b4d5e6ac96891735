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
 * The host uids that own sandboxes' user namespaces on a root host: one per sandbox, above the
 * sandbox id range, never a sandbox id. The kernel charges a user namespace's per-user budgets
 * (inotify instances and watches, processes, POSIX message queues) at every level up to the
 * host, there to the namespace's owner: owned by root, every sandbox drew on root's own 128
 * inotify instances, so one sandbox could make inotify_init fail for host root and for every
 * other sandbox. Nothing runs as these uids on the host, and only root could become one.
 */
export const NAMESPACE_OWNER_BASE = SANDBOX_ID_BASE + SANDBOX_ID_COUNT
export const NAMESPACE_OWNER_COUNT = 1 << 24

/**
 * The owner of sandbox `id`'s user namespace: from the 24 random bits at the start of its
 * UUID, so sandboxes of every process on the host draw apart without coordinating (two of 100
 * live sandboxes share one with a chance of 3 in 10 000; they then share these budgets).
 */
export function namespaceOwner(sandboxId: string): number {
  const bits = Number.parseInt(sandboxId.slice(0, 6), 16)
  return NAMESPACE_OWNER_BASE + (Number.isFinite(bits) ? bits : 0)
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
  await Promise.all([
    ownByIdRange(imageRootfs, mapping.hostRoot, SANDBOX_ID_COUNT),
    fsp.chown(controlDir, mapping.hostRoot, mapping.hostRoot),
  ])
}
