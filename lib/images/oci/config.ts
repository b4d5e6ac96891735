/**
 * The parts of an image's config that krunbox honours or records: Env (every command's base
 * environment), WorkingDir (default cwd), User (default user), Entrypoint/Cmd, ExposedPorts,
 * Labels, and the ordered diff_ids that key the published rootfs.
 */
export interface OciImageConfig {
  env: Record<string, string>
  workingDir: string | null
  user: string | null
  entrypoint: string[] | null
  cmd: string[] | null
  exposedPorts: string[]
  labels: Record<string, string>
}

export interface ParsedImageConfig {
  os: string | undefined
  architecture: string | undefined
  variant: string | undefined
  diffIds: string[]
  config: OciImageConfig
}

import { posix } from 'node:path'

const DIGEST = /^sha256:[0-9a-f]{64}$/
const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]*$/

function stringList(value: unknown): string[] | null {
  return Array.isArray(value) && value.every((v) => typeof v === 'string') ? (value as string[]) : null
}

export function parseImageConfig(body: Buffer): ParsedImageConfig {
  let doc: Record<string, unknown>
  try {
    doc = JSON.parse(body.toString('utf8')) as Record<string, unknown>
  } catch {
    throw new Error('the image config is not JSON')
  }
  const rootfs = doc.rootfs as { type?: unknown; diff_ids?: unknown } | undefined
  const diffIds = stringList(rootfs?.diff_ids)
  if (diffIds === null || diffIds.some((d) => !DIGEST.test(d)))
    throw new Error('the image config has no valid rootfs.diff_ids')
  const c = (doc.config ?? {}) as Record<string, unknown>
  const env: Record<string, string> = {}
  for (const entry of stringList(c.Env) ?? []) {
    const eq = entry.indexOf('=')
    const key = eq === -1 ? entry : entry.slice(0, eq)
    // Keys a command's environment cannot carry are left out rather than failing every exec.
    if (!ENV_KEY.test(key) || key.startsWith('KRUNBOX') || entry.includes('\0')) continue
    env[key] = eq === -1 ? '' : entry.slice(eq + 1)
  }
  const labels: Record<string, string> = {}
  if (c.Labels && typeof c.Labels === 'object')
    for (const [k, v] of Object.entries(c.Labels as Record<string, unknown>)) if (typeof v === 'string') labels[k] = v
  // "/" (or nothing) leaves krunbox's /workspace as the default cwd: the agent's workspace is a directory below /.
  const dir =
    typeof c.WorkingDir === 'string' && c.WorkingDir.startsWith('/') && !c.WorkingDir.includes('\0')
      ? posix.normalize(c.WorkingDir).replace(/\/+$/, '')
      : ''
  const workingDir = dir === '' ? null : dir
  const user = typeof c.User === 'string' && c.User !== '' ? c.User : null
  return {
    os: typeof doc.os === 'string' ? doc.os : undefined,
    architecture: typeof doc.architecture === 'string' ? doc.architecture : undefined,
    variant: typeof doc.variant === 'string' ? doc.variant : undefined,
    diffIds,
    config: {
      env,
      workingDir,
      user,
      entrypoint: stringList(c.Entrypoint),
      cmd: stringList(c.Cmd),
      exposedPorts: c.ExposedPorts && typeof c.ExposedPorts === 'object' ? Object.keys(c.ExposedPorts as object) : [],
      labels,
    },
  }
}
