/**
 * OCI image references: `registry/repo:tag`, `registry/repo@sha256:…`, and Docker Hub short
 * forms (`python:3.12-slim` is docker.io/library/python:3.12-slim). A bare word (no tag, no
 * digest) is never a reference: it stays a preset or custom image name.
 */
import { SandboxError } from '../../errors.js'
import { errors } from '../../protocol/errors.gen.js'

export interface ImageReference {
  /** host[:port] as written (docker.io for Docker Hub). */
  registry: string
  repository: string
  tag: string | null
  digest: string | null
  /** registry/repository[:tag][@digest]: the same image always spells the same way. */
  canonical: string
}

export const DOCKER_HUB = 'docker.io'
const DIGEST = /^sha256:[0-9a-f]{64}$/
const TAG = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/
const PATH_COMPONENT = /^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$/
const HOST =
  /^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$/
const MAX_REFERENCE = 512

/**
 * Whether a string is meant as a reference rather than an image name or a path: its last
 * path segment carries a tag or a digest, and it is not a path (/, ./, ../, ~).
 */
export function looksLikeReference(value: string): boolean {
  if (typeof value !== 'string' || value === '' || /^[/.~]/.test(value)) return false
  const last = value.slice(value.lastIndexOf('/') + 1)
  return last.includes(':') || last.includes('@')
}

function bad(value: string, problem: string): SandboxError {
  return errors.badArgument({ subject: `image reference ${JSON.stringify(value)}`, problem })
}

export function parseReference(value: unknown): ImageReference {
  if (typeof value !== 'string')
    throw errors.badArgument({ subject: 'image reference', problem: `must be a string, got ${typeof value}` })
  if (value.length > MAX_REFERENCE) throw bad(value.slice(0, 64) + '…', `is longer than ${MAX_REFERENCE} characters`)
  if (/[\s\0]/.test(value)) throw bad(value, 'contains white space or NUL')
  let rest = value
  let digest: string | null = null
  const at = rest.indexOf('@')
  if (at !== -1) {
    digest = rest.slice(at + 1)
    rest = rest.slice(0, at)
    if (!DIGEST.test(digest)) throw bad(value, 'has a digest that is not sha256: followed by 64 lower-case hex digits')
  }
  let tag: string | null = null
  const colon = rest.lastIndexOf(':')
  if (colon > rest.lastIndexOf('/')) {
    tag = rest.slice(colon + 1)
    rest = rest.slice(0, colon)
    if (!TAG.test(tag)) throw bad(value, 'has an invalid tag (1-128 of A-Z a-z 0-9 _ . - not starting with . or -)')
  }
  if (tag === null && digest === null) throw bad(value, 'has neither a :tag nor an @sha256: digest')
  const parts = rest.split('/')
  let registry = DOCKER_HUB
  const first = parts[0]
  if (
    parts.length > 1 &&
    (first.includes('.') || first.includes(':') || first === 'localhost' || first.startsWith('['))
  ) {
    registry = first
    parts.shift()
  }
  if (!HOST.test(registry)) throw bad(value, `has an invalid registry host ${JSON.stringify(registry)}`)
  if (registry === 'index.docker.io' || registry === 'registry-1.docker.io') registry = DOCKER_HUB
  if (registry === DOCKER_HUB && parts.length === 1) parts.unshift('library')
  if (parts.length === 0 || parts.some((p) => !PATH_COMPONENT.test(p))) {
    throw bad(value, 'has an invalid repository (lower-case components of a-z 0-9 separated by . _ __ - and /)')
  }
  const repository = parts.join('/')
  if (repository.length > 255) throw bad(value, 'has a repository longer than 255 characters')
  const canonical = `${registry}/${repository}${tag === null ? '' : `:${tag}`}${digest === null ? '' : `@${digest}`}`
  return { registry, repository, tag, digest, canonical }
}

/** Loopback registries are spoken to over plain HTTP, as Docker does. */
export function isLoopbackRegistry(registry: string): boolean {
  const host = registry.replace(/:[0-9]+$/, '').replace(/^\[|\]$/g, '')
  return host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host)
}

/** The base URL of a registry's API: Docker Hub's is not its name. */
export function registryBaseUrl(registry: string, insecure: readonly string[] = []): string {
  const plain = isLoopbackRegistry(registry) || insecure.includes(registry)
  const host = registry === DOCKER_HUB ? 'registry-1.docker.io' : registry
  return `${plain ? 'http' : 'https'}://${host}`
}
