/**
 * The config and manifest documents of an exported image. The config starts from the base
 * image's own when it is an OCI image (every field it has, its history), else from a minimal one
 * for this host's platform with the PATH commands get; the export's fields are set over it and
 * its diff_ids are the image's layers, in order.
 */
import { createHash } from 'node:crypto'
import type { LayerBlob } from './layer-writer.js'
import { MEDIA, hostPlatform, type Platform } from './manifest.js'
import type { ExportImageConfig } from './export-options.js'

/** What the agent gives a command without an image Env (agent/exec/env.go). */
const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'

export interface JsonBlob {
  digest: string
  size: number
  body: Buffer
  mediaType: string
}

export function jsonBlob(doc: unknown, mediaType: string): JsonBlob {
  const body = Buffer.from(JSON.stringify(doc))
  return { digest: `sha256:${createHash('sha256').update(body).digest('hex')}`, size: body.length, body, mediaType }
}

export interface ConfigInput {
  /** The base image's config, or null (a preset or custom tree). */
  base: Record<string, unknown> | null
  set: ExportImageConfig
  /** Every layer's diff_id, the base's first. */
  diffIds: string[]
  /** What made each layer the base did not have: one history entry each. */
  added: string[]
  /** For a tree base (base null): the environment its image gives commands (a preset's /opt/venv on PATH). */
  treeEnv?: Record<string, string>
}

export function imageConfig(input: ConfigInput): { blob: JsonBlob; platform: Platform } {
  const now = new Date().toISOString()
  const doc: Record<string, unknown> =
    input.base === null
      ? newConfig(input.treeEnv ?? {})
      : (JSON.parse(JSON.stringify(input.base)) as Record<string, unknown>)
  const c = (typeof doc.config === 'object' && doc.config !== null ? doc.config : {}) as Record<string, unknown>
  const { env, workingDir, user, cmd, entrypoint, labels } = input.set
  if (env !== undefined) c.Env = withEnv(Array.isArray(c.Env) ? (c.Env as string[]) : [], env)
  if (workingDir !== undefined) c.WorkingDir = workingDir
  if (user !== undefined) c.User = user
  if (cmd !== undefined) c.Cmd = cmd
  if (entrypoint !== undefined) c.Entrypoint = entrypoint
  if (labels !== undefined)
    c.Labels = { ...(typeof c.Labels === 'object' && c.Labels !== null ? c.Labels : {}), ...labels }
  doc.config = c
  doc.created = now
  doc.rootfs = { type: 'layers', diff_ids: input.diffIds }
  // A base without history keeps none (its entries would not match its layers); otherwise one entry per new layer.
  if (input.base === null || Array.isArray(doc.history))
    doc.history = [
      ...(Array.isArray(doc.history) ? (doc.history as unknown[]) : []),
      ...input.added.map((createdBy) => ({ created: now, created_by: createdBy })),
    ]
  const platform: Platform = {
    os: typeof doc.os === 'string' ? doc.os : 'linux',
    architecture: typeof doc.architecture === 'string' ? doc.architecture : hostPlatform().architecture,
    ...(typeof doc.variant === 'string' && { variant: doc.variant }),
  }
  return { blob: jsonBlob(doc, MEDIA.ociConfig), platform }
}

function newConfig(treeEnv: Record<string, string>): Record<string, unknown> {
  const p = hostPlatform()
  return {
    architecture: p.architecture,
    ...(p.variant && { variant: p.variant }),
    os: p.os,
    config: { Env: withEnv([`PATH=${DEFAULT_PATH}`], treeEnv) },
  }
}

/** The base's Env with `set`'s keys replaced in place or added at the end. */
function withEnv(base: string[], set: Record<string, string>): string[] {
  const left = new Map(Object.entries(set))
  const out = base.map((entry) => {
    const key = entry.includes('=') ? entry.slice(0, entry.indexOf('=')) : entry
    const value = left.get(key)
    if (value === undefined) return entry
    left.delete(key)
    return `${key}=${value}`
  })
  for (const [k, v] of left) out.push(`${k}=${v}`)
  return out
}

export function imageManifest(config: JsonBlob, layers: readonly LayerBlob[]): JsonBlob {
  return jsonBlob(
    {
      schemaVersion: 2,
      mediaType: MEDIA.ociManifest,
      config: { mediaType: MEDIA.ociConfig, digest: config.digest, size: config.size },
      layers: layers.map((l) => ({ mediaType: l.mediaType, digest: l.digest, size: l.size })),
    },
    MEDIA.ociManifest,
  )
}
