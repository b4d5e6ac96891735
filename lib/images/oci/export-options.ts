/**
 * What `sb.commit()` and `rt.snapshots.export()` take: one target (an OCI image layout
 * directory, a `docker save`-compatible tar, or a registry to push to), the image's name there,
 * the config fields to set over the base image's, and the registry deadline. Every value is
 * checked before any work starts; a bad one is S001 (S003 out of range) naming it.
 */
import path from 'node:path'
import {
  absolutePath,
  assertObject,
  assertString,
  describe,
  envMap,
  intInRange,
  optionsObject,
  stringArray,
} from '../../options.js'
import { errors } from '../../protocol/errors.gen.js'
import { parseReference, type ImageReference } from './reference.js'

/** Config fields an export sets; each given one replaces the base image's (Env and Labels: per key, over the base's). */
export interface ExportImageConfig {
  env?: Record<string, string>
  /** Absolute path. */
  workingDir?: string
  /** `user`, `uid`, `user:group` or `uid:gid`, as OCI's config takes it. */
  user?: string
  cmd?: string[]
  entrypoint?: string[]
  labels?: Record<string, string>
}

export interface ExportOptions {
  /** Writes an OCI image layout directory at this path, which must not exist. */
  layout?: string
  /** Writes a `docker save`-compatible tar (also an OCI layout inside) at this path, which must not exist. */
  archive?: string
  /** Pushes to this reference (`registry/repository:tag`) with the credentials pulls use (the Docker config). */
  push?: string
  /**
   * The image's name in a layout (its `org.opencontainers.image.ref.name`, default `latest`) or an
   * archive (its `RepoTags` entry, `repository:tag`; none by default). A push is named by its reference.
   */
  name?: string
  config?: ExportImageConfig
  /** A registry request that neither answers nor moves bytes for this long fails (ms, default 60 000). */
  timeoutMs?: number
}

/** What an export made. */
export interface ExportResult {
  manifestDigest: string
  configDigest: string
  /** Every layer of the image, the base image's first. */
  layers: Array<{ digest: string; size: number; diffId: string; mediaType: string }>
  /** The layout's or archive's absolute path, or the pushed reference. */
  target: string
}

export type ExportTarget =
  | { kind: 'layout'; path: string; refName: string }
  | { kind: 'archive'; path: string; repoTag: string | null }
  | { kind: 'registry'; ref: ImageReference; timeoutMs: number }

export interface ExportPlan {
  target: ExportTarget
  config: ExportImageConfig
}

export const DEFAULT_PUSH_TIMEOUT_MS = 60_000
const KEYS = ['layout', 'archive', 'push', 'name', 'config', 'timeoutMs'] as const
const CONFIG_KEYS = ['env', 'workingDir', 'user', 'cmd', 'entrypoint', 'labels'] as const
/** OCI's ref name annotation: components of A-Z a-z 0-9 and - _ . : @ / + = (image-layout spec). */
const REF_NAME = /^[A-Za-z0-9]+(?:[-._:@/+=][A-Za-z0-9]+)*$/
const REPO_TAG =
  /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:\/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/
const CONFIG_USER = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,63})?$/

export function exportPlan(options: unknown): ExportPlan {
  if (options === undefined)
    throw errors.badArgument({ subject: 'export options', problem: 'must name a target: layout, archive or push' })
  const o = optionsObject(options, 'export options', KEYS)
  const given = (['layout', 'archive', 'push'] as const).filter((k) => o[k] !== undefined)
  if (given.length !== 1)
    throw errors.badArgument({
      subject: 'export options',
      problem: `must name exactly one target of layout, archive and push, got ${given.length === 0 ? 'none' : given.join(' and ')}`,
    })
  const config = exportConfig(o.config)
  if (o.push !== undefined) {
    if (o.name !== undefined)
      throw errors.badArgument({
        subject: 'export options',
        problem: 'name is for a layout or an archive; a push is named by its reference',
      })
    const ref = parseReference(o.push)
    if (ref.tag === null || ref.digest !== null)
      throw errors.badArgument({
        subject: `push reference ${describe(o.push)}`,
        problem: 'must name a tag and no digest (the digest is the manifest written, in the result)',
      })
    const timeoutMs = intInRange(o.timeoutMs, 'timeoutMs', 1, 24 * 3600 * 1000, DEFAULT_PUSH_TIMEOUT_MS)
    return { target: { kind: 'registry', ref, timeoutMs }, config }
  }
  if (o.timeoutMs !== undefined)
    throw errors.badArgument({ subject: 'export options', problem: 'timeoutMs is for a push' })
  if (o.layout !== undefined) {
    const refName = o.name === undefined ? 'latest' : named(o.name, REF_NAME, 'a ref name such as "latest" or "app:1"')
    return { target: { kind: 'layout', path: targetPath(o.layout, 'layout'), refName }, config }
  }
  const repoTag = o.name === undefined ? null : named(o.name, REPO_TAG, 'repository:tag, such as "acme/app:1"')
  return { target: { kind: 'archive', path: targetPath(o.archive, 'archive'), repoTag }, config }
}

function targetPath(value: unknown, name: string): string {
  assertString(value, name)
  if (value.endsWith('/') || value.split('/').at(-1) === '.' || value.split('/').at(-1) === '..')
    throw errors.badArgument({ subject: name, problem: `must name a new file or directory, got ${describe(value)}` })
  return path.resolve(value)
}

function named(value: unknown, pattern: RegExp, what: string): string {
  assertString(value, 'name')
  if (value.length > 255 || !pattern.test(value))
    throw errors.badArgument({ subject: `name ${describe(value)}`, problem: `must be ${what}` })
  return value
}

function exportConfig(value: unknown): ExportImageConfig {
  const c = optionsObject(value, 'config', CONFIG_KEYS)
  const out: ExportImageConfig = {}
  if (c.env !== undefined) out.env = envMap(c.env, 'config.env')
  if (c.workingDir !== undefined) out.workingDir = absolutePath(c.workingDir, 'config.workingDir')
  if (c.user !== undefined) {
    assertString(c.user, 'config.user')
    if (!CONFIG_USER.test(c.user))
      throw errors.badArgument({
        subject: `config.user ${describe(c.user)}`,
        problem: 'must be user, uid, user:group or uid:gid',
      })
    out.user = c.user
  }
  for (const key of ['cmd', 'entrypoint'] as const) {
    if (c[key] === undefined) continue
    const list = stringArray(c[key], `config.${key}`)
    if (list.length === 0) throw errors.badArgument({ subject: `config.${key}`, problem: 'must not be empty' })
    out[key] = list
  }
  if (c.labels !== undefined) {
    assertObject(c.labels, 'config.labels')
    const labels: Record<string, string> = {}
    for (const [k, v] of Object.entries(c.labels)) {
      assertString(k, 'config.labels key')
      assertString(v, `config.labels.${k}`, { nonEmpty: false })
      labels[k] = v
    }
    out.labels = labels
  }
  return out
}
