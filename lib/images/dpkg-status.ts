/** The packages a configured Debian tree holds, as its dpkg database says (var/lib/dpkg/status). */
import fs from 'node:fs/promises'
import path from 'node:path'
import type { ResolvedPackage } from './types.js'

/** The installed packages of a dpkg status file's text, sorted by name. */
export function parseDpkgStatus(text: string): ResolvedPackage[] {
  const packages: ResolvedPackage[] = []
  for (const stanza of text.split(/\n\s*\n/)) {
    const field = (name: string) => new RegExp(`^${name}: *(.*)$`, 'm').exec(stanza)?.[1]?.trim()
    const name = field('Package')
    const version = field('Version')
    if (name === undefined || version === undefined || !/ installed$/.test(field('Status') ?? '')) continue
    packages.push({ name, version, arch: field('Architecture') ?? 'all' })
  }
  return packages.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
}

export async function installedPackages(root: string): Promise<ResolvedPackage[]> {
  return parseDpkgStatus(await fs.readFile(path.join(root, 'var/lib/dpkg/status'), 'utf8').catch(() => ''))
}
