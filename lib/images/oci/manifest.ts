/**
 * Manifests and indexes, Docker schema 2 and OCI alike, and the choice of this host's
 * platform from an index. The optional `mediaType` field is often absent (umoci omits it):
 * then the response's Content-Type decides, then the document's shape. What a document says
 * is quoted capped in messages (describe): a registry or an archive may send megabytes.
 */
import { describe } from '../../options.js'

export const MEDIA = {
  ociManifest: 'application/vnd.oci.image.manifest.v1+json',
  ociIndex: 'application/vnd.oci.image.index.v1+json',
  dockerManifest: 'application/vnd.docker.distribution.manifest.v2+json',
  dockerList: 'application/vnd.docker.distribution.manifest.list.v2+json',
  ociConfig: 'application/vnd.oci.image.config.v1+json',
  dockerConfig: 'application/vnd.docker.container.image.v1+json',
} as const

export const MANIFEST_ACCEPT = [MEDIA.ociIndex, MEDIA.dockerList, MEDIA.ociManifest, MEDIA.dockerManifest].join(', ')

export interface Descriptor {
  mediaType: string
  digest: string
  size: number
  platform?: Platform
  /** Its `org.opencontainers.image.ref.name` annotation (an image layout names its images so). */
  refName?: string
}

export const REF_NAME_ANNOTATION = 'org.opencontainers.image.ref.name'

export interface Platform {
  os: string
  architecture: string
  variant?: string
}

export type ParsedManifest =
  { kind: 'index'; manifests: Descriptor[] } | { kind: 'manifest'; config: Descriptor; layers: Descriptor[] }

const DIGEST = /^sha256:[0-9a-f]{64}$/
export const MAX_MANIFEST_BYTES = 4 * 1024 * 1024
export const MAX_LAYERS = 256

function descriptor(value: unknown, what: string): Descriptor {
  const d = value as Partial<Descriptor> | null
  if (d === null || typeof d !== 'object') throw new Error(`${what} is not a descriptor`)
  if (typeof d.digest !== 'string' || !DIGEST.test(d.digest))
    throw new Error(`${what} has no sha256 digest (got ${describe(d.digest)})`)
  if (typeof d.size !== 'number' || !Number.isSafeInteger(d.size) || d.size < 0)
    throw new Error(`${what} has no valid size`)
  const out: Descriptor = {
    mediaType: typeof d.mediaType === 'string' ? d.mediaType : '',
    digest: d.digest,
    size: d.size,
  }
  const refName = (d as { annotations?: Record<string, unknown> }).annotations?.[REF_NAME_ANNOTATION]
  if (typeof refName === 'string') out.refName = refName
  const p = d.platform as Partial<Platform> | undefined
  if (p && typeof p.os === 'string' && typeof p.architecture === 'string')
    out.platform = {
      os: p.os,
      architecture: p.architecture,
      ...(typeof p.variant === 'string' && { variant: p.variant }),
    }
  return out
}

export function parseManifest(body: Buffer, contentType: string | null): ParsedManifest {
  let doc: Record<string, unknown>
  try {
    doc = JSON.parse(body.toString('utf8')) as Record<string, unknown>
  } catch {
    throw new Error('the manifest is not JSON')
  }
  if (doc === null || typeof doc !== 'object') throw new Error('the manifest is not a JSON object')
  if (doc.schemaVersion === 1)
    throw new Error('Docker schema 1 manifests are not supported (re-push the image with a current client)')
  const type = (typeof doc.mediaType === 'string' && doc.mediaType) || (contentType ?? '').split(';')[0].trim()
  const isIndex =
    type === MEDIA.ociIndex ||
    type === MEDIA.dockerList ||
    (!type.includes('manifest.v') && Array.isArray(doc.manifests))
  if (isIndex || (type === '' && Array.isArray(doc.manifests))) {
    if (!Array.isArray(doc.manifests)) throw new Error('the index has no manifests')
    return { kind: 'index', manifests: doc.manifests.map((m, i) => descriptor(m, `index entry ${i}`)) }
  }
  if (type !== '' && type !== MEDIA.ociManifest && type !== MEDIA.dockerManifest && type !== 'application/json')
    throw new Error(`unsupported manifest media type ${describe(type)}`)
  if (!Array.isArray(doc.layers)) throw new Error('the manifest has no layers')
  if (doc.layers.length > MAX_LAYERS)
    throw new Error(`the manifest has ${doc.layers.length} layers (at most ${MAX_LAYERS})`)
  return {
    kind: 'manifest',
    config: descriptor(doc.config, 'the config'),
    layers: doc.layers.map((l, i) => descriptor(l, `layer ${i}`)),
  }
}

/** linux/<arch>[/<variant>] of this host, in OCI's words. */
export function hostPlatform(): Platform {
  const arch = process.arch === 'x64' ? 'amd64' : process.arch === 'ia32' ? '386' : process.arch
  return arch === 'arm64' ? { os: 'linux', architecture: 'arm64', variant: 'v8' } : { os: 'linux', architecture: arch }
}

export function platformName(p: Platform | undefined): string {
  if (p === undefined) return 'unknown'
  return `${p.os}/${p.architecture}${p.variant ? `/${p.variant}` : ''}`
}

/** arm64's variant is v8 whether it is written or not. */
function matches(p: Platform, host: Platform): boolean {
  if (p.os !== host.os || p.architecture !== host.architecture) return false
  if (host.architecture === 'arm64') return p.variant === undefined || p.variant === '' || p.variant === 'v8'
  return p.variant === undefined || p.variant === '' || p.variant === host.variant
}

/** The index entry for this host, or null; attestation manifests (platform unknown/unknown) never match. */
export function selectPlatform(manifests: Descriptor[], host: Platform = hostPlatform()): Descriptor | null {
  return manifests.find((m) => m.platform !== undefined && matches(m.platform, host)) ?? null
}

/** The platforms an index names, for a message: the first few, each capped; "none named" when there is none. */
export function listPlatforms(manifests: Descriptor[], shown = 8): string {
  const names = [
    ...new Set(manifests.filter((m) => m.platform && m.platform.os !== 'unknown').map((m) => platformName(m.platform))),
  ]
  if (names.length === 0) return 'none named'
  const listed = names.slice(0, shown).map((n) => (n.length > 80 ? describe(n) : n))
  return names.length > shown ? `${listed.join(', ')} and ${names.length - shown} more` : listed.join(', ')
}

/** A config's own platform, for a message (capped: the config is the image's word). */
export function configPlatformName(config: { os?: string; architecture?: string; variant?: string }): string {
  const name = `${config.os}/${config.architecture}${config.variant ? `/${config.variant}` : ''}`
  return name.length > 80 ? describe(name) : name
}

/** A config's own platform (single-platform images say it there). */
export function configMatchesHost(
  config: { os?: string; architecture?: string; variant?: string },
  host: Platform = hostPlatform(),
): boolean {
  if (typeof config.os !== 'string' || typeof config.architecture !== 'string') return true
  return matches(
    { os: config.os, architecture: config.architecture, ...(config.variant && { variant: config.variant }) },
    host,
  )
}
