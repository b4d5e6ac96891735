/**
 * Which archive a preset is built from, and its state now.
 *
 * The archive's URIs come from the host's apt sources at run time (never from this code): an
 * entry that lists the suite itself (a bookworm host), else an entry of the same kind for another
 * suite whose archive also serves this one (a trixie host's Debian archive), else what the
 * previous build of the image recorded (mmdebstrap's own choice on a host with no Debian
 * archive in its sources). The state is the digest of each dist's InRelease file: one small
 * request per dist, made by `images build`, never by create.
 */
import { createHash } from 'node:crypto'
import fs from 'node:fs/promises'
import path from 'node:path'
import type { ReleaseFile } from './types.js'

export const DEFAULT_APT_SOURCES: readonly string[] = ['/etc/apt/sources.list', '/etc/apt/sources.list.d']

/** One `deb` entry of the host's apt sources (both the one-line and the deb822 format). */
export interface AptEntry {
  uris: string[]
  suites: string[]
}

/** One line of the sources a build uses: `deb <uri> <dist> main`. */
export interface ArchiveSource {
  uri: string
  dist: string
}

export interface ArchiveState {
  sources: ArchiveSource[]
  /** One InRelease file per source (its URL, sha256 and Date). */
  releases: ReleaseFile[]
}

const RELEASE_TIMEOUT_MS = 15_000
/** An InRelease file is about 150 KB; anything far larger is not one. */
const RELEASE_MAX_BYTES = 8 * 1024 * 1024

function parseOneLine(text: string): AptEntry[] {
  const entries: AptEntry[] = []
  for (const raw of text.split('\n')) {
    const m = /^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)/.exec(raw.replace(/#.*$/, ''))
    if (m !== null) entries.push({ uris: [m[1]], suites: [m[2]] })
  }
  return entries
}

function parseDeb822(text: string): AptEntry[] {
  const entries: AptEntry[] = []
  for (const stanza of text.split(/\n\s*\n/)) {
    const fields = new Map<string, string>()
    let last: string | null = null
    for (const line of stanza.split('\n')) {
      if (line.startsWith('#')) continue
      if (/^\s/.test(line) && last !== null) {
        fields.set(last, `${fields.get(last)} ${line.trim()}`)
        continue
      }
      const m = /^([A-Za-z-]+):\s*(.*)$/.exec(line)
      if (m === null) continue
      last = m[1].toLowerCase()
      fields.set(last, m[2].trim())
    }
    const words = (key: string) => (fields.get(key) ?? '').split(/\s+/).filter(Boolean)
    if (!words('types').includes('deb') || (fields.get('enabled') ?? 'yes').toLowerCase() === 'no') continue
    entries.push({ uris: words('uris'), suites: words('suites') })
  }
  return entries
}

/** The `deb` entries of apt source files and directories (`*.list`, `*.sources`), in apt's order. */
export async function readAptSources(paths: readonly string[] = DEFAULT_APT_SOURCES): Promise<AptEntry[]> {
  const entries: AptEntry[] = []
  for (const p of paths) {
    const stat = await fs.stat(p).catch(() => null)
    if (stat === null) continue
    const files = stat.isDirectory()
      ? (await fs.readdir(p))
          .filter((n) => /\.(list|sources)$/.test(n))
          .sort()
          .map((n) => path.join(p, n))
      : [p]
    for (const file of files) {
      const text = await fs.readFile(file, 'utf8').catch(() => '')
      entries.push(...(file.endsWith('.sources') ? parseDeb822(text) : parseOneLine(text)))
    }
  }
  return entries
}

/** The dists a build of `suite` uses: the suite, its updates and its security updates. */
export function archiveDists(suite: string): string[] {
  return [suite, `${suite}-updates`, `${suite}-security`]
}

function distKind(dist: string): string {
  return /-(updates|security)$/.exec(dist)?.[1] ?? (dist.includes('-') || dist.includes('/') ? 'other' : 'release')
}

/** URIs that may serve `dist`, best first: the host's entries for it, for a dist of its kind, then recorded ones. */
export function candidateUris(
  dist: string,
  entries: readonly AptEntry[],
  recorded: readonly ArchiveSource[],
): string[] {
  const exact = entries.filter((e) => e.suites.includes(dist)).flatMap((e) => e.uris)
  const sameKind = entries.filter((e) => e.suites.some((s) => distKind(s) === distKind(dist))).flatMap((e) => e.uris)
  const fromBefore = recorded.filter((s) => s.dist === dist).map((s) => s.uri)
  const uris = [...exact, ...sameKind, ...fromBefore]
    .filter((u) => /^https?:\/\//.test(u))
    .map((u) => u.replace(/\/+$/, ''))
  return [...new Set(uris)]
}

export function releaseUrl(source: ArchiveSource): string {
  return `${source.uri}/dists/${source.dist}/InRelease`
}

/** The InRelease file of `dist` at `uri`, or null when that archive does not serve it. */
/** InRelease fetches under way, by URL: concurrent builds and checks (64 creates of an unbuilt image) share one. */
const releasesInFlight = new Map<string, Promise<ReleaseFile | null>>()

function fetchRelease(source: ArchiveSource): Promise<ReleaseFile | null> {
  const url = releaseUrl(source)
  const running = releasesInFlight.get(url)
  if (running !== undefined) return running
  const fetched = fetchReleaseOnce(url, source).finally(() => releasesInFlight.delete(url))
  releasesInFlight.set(url, fetched)
  return fetched
}

async function fetchReleaseOnce(url: string, source: ArchiveSource): Promise<ReleaseFile | null> {
  const response = await fetch(url, { signal: AbortSignal.timeout(RELEASE_TIMEOUT_MS), redirect: 'follow' }).catch(
    () => null,
  )
  if (response === null || !response.ok) {
    await response?.body?.cancel().catch(() => undefined)
    return null
  }
  if (Number(response.headers.get('content-length') ?? 0) > RELEASE_MAX_BYTES) {
    await response.body?.cancel().catch(() => undefined)
    return null
  }
  const bytes = Buffer.from(await response.arrayBuffer().catch(() => new ArrayBuffer(0)))
  const text = bytes.toString('utf8')
  // Another archive (an Ubuntu mirror, a captive portal) answers something else.
  if (
    bytes.length > RELEASE_MAX_BYTES ||
    !new RegExp(`^Codename: ${source.dist.replace(/[.+]/g, '\\$&')}$`, 'm').test(text)
  )
    return null
  return {
    file: url,
    sha256: createHash('sha256').update(bytes).digest('hex'),
    date: /^Date: (.+)$/m.exec(text)?.[1]?.trim() ?? null,
  }
}

/**
 * The archive a build of `suite` would use and its state now, or null when no known URI serves
 * the suite itself (then the build uses mmdebstrap's default archive and records it).
 */
export async function currentArchiveState(
  suite: string,
  entries: readonly AptEntry[],
  recorded: readonly ArchiveSource[],
): Promise<ArchiveState | null> {
  const found = await Promise.all(
    archiveDists(suite).map(async (dist) => {
      for (const uri of candidateUris(dist, entries, recorded)) {
        const release = await fetchRelease({ uri, dist })
        if (release !== null) return { source: { uri, dist }, release }
      }
      return null
    }),
  )
  if (found[0] === null) return null
  const present = found.filter((f) => f !== null)
  return { sources: present.map((f) => f.source), releases: present.map((f) => f.release) }
}

/** The sources mmdebstrap wrote into the image (one-line format), before apt's files are trimmed. */
export function parseChrootSources(text: string): ArchiveSource[] {
  return parseOneLine(text).flatMap((e) => e.uris.map((uri) => ({ uri: uri.replace(/\/+$/, ''), dist: e.suites[0] })))
}
