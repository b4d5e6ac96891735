/**
 * What a build recorded about the Debian archive: the packages it unpacked and the Release
 * files apt fetched (their digests are part of the id; see debian-archive.ts and recipe.ts).
 */
import type { ReleaseFile, ResolvedPackage } from './types.js'

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
