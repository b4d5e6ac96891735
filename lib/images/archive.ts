/**
 * The Debian archive's state, as far as image ids and manifests are concerned.
 *
 * The id uses the Release files for the suite in the host's apt lists (the suite itself,
 * -updates and -security): they are local, cheap to read, and change when `apt-get update`
 * sees a new archive state. mmdebstrap fetches its own fresh copies during a build; those
 * are recorded in the manifest (`archive.fetched`) but cannot be part of the id, which must
 * be known before building. So: run `apt-get update` on the host to make a rebuild pick up
 * new archive contents.
 */
import { createHash } from 'node:crypto'
import fs from 'node:fs/promises'
import path from 'node:path'
import type { ReleaseFile, ResolvedPackage } from './types.js'

export const DEFAULT_APT_LISTS_DIR = '/var/lib/apt/lists'

function dateField(text: string): string | null {
  return /^Date: (.+)$/m.exec(text)?.[1]?.trim() ?? null
}

/** Release files for `suite` in an apt lists directory, sorted by file name. */
export async function hostReleaseFiles(suite: string, listsDir = DEFAULT_APT_LISTS_DIR): Promise<ReleaseFile[]> {
  const names = await fs.readdir(listsDir).catch(() => [] as string[])
  const escaped = suite.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
  const pattern = new RegExp(`_dists_${escaped}(-updates|-security|_updates)?_(InRelease|Release)$`)
  const files: ReleaseFile[] = []
  for (const name of names.filter((n) => pattern.test(n)).sort()) {
    const text = await fs.readFile(path.join(listsDir, name), 'utf8').catch(() => null)
    if (text === null) continue
    files.push({ file: name, sha256: createHash('sha256').update(text).digest('hex'), date: dateField(text) })
  }
  return files
}

/** What goes into the image id for the archive; stable when no Release file is found. */
export function archiveFingerprint(files: ReleaseFile[]): string {
  if (files.length === 0) return 'no-host-release-files'
  return files.map((f) => `${f.file}=${f.sha256}`).join('\n')
}

/**
 * "name_version_arch.deb" as apt stores it (":" of an epoch escaped as "%3a").
 * Returns null for anything else.
 */
export function parseDebFileName(file: string): ResolvedPackage | null {
  const m = /^([^_]+)_([^_]+)_([^_]+)\.deb$/.exec(file)
  if (m === null) return null
  return { name: m[1], version: decodeURIComponent(m[2]), arch: m[3] }
}

/**
 * Parses what the extract hook recorded: `sha256sum` lines ("<hex>  <file>") and
 * `grep -H` Date lines ("<file>:Date: <date>").
 */
export function parseFetchedReleases(text: string): ReleaseFile[] {
  const byFile = new Map<string, ReleaseFile>()
  for (const line of text.split('\n')) {
    const sum = /^([0-9a-f]{64}) [ *]?(.+)$/.exec(line)
    if (sum !== null) {
      byFile.set(sum[2], { file: sum[2], sha256: sum[1], date: byFile.get(sum[2])?.date ?? null })
      continue
    }
    const date = /^(.+?):Date: (.+)$/.exec(line)
    if (date !== null) {
      const entry = byFile.get(date[1]) ?? { file: date[1], sha256: '', date: null }
      entry.date = date[2].trim()
      byFile.set(date[1], entry)
    }
  }
  return [...byFile.values()].sort((a, b) => (a.file < b.file ? -1 : 1))
}
