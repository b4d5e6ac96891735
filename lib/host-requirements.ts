/**
 * What each driver and the image builder need from the host, how to tell whether it is there
 * (a file or a program on PATH; no addon needed), and the package that provides it on apt, dnf
 * and pacman systems, so `krunbox doctor` and the errors can name the exact command to run.
 */
import fs from 'node:fs'
import os from 'node:os'
import { findExecutable } from './paths.js'

export type PackageManager = 'apt' | 'dnf' | 'pacman'

export interface HostRequirement {
  /** What it is, for a person. */
  name: string
  /** Who needs it. */
  neededBy: string
  /** The package that provides it, per package manager (null: none carries it there). */
  packages: Record<PackageManager, string | null>
  /** True when this host has it. */
  present(): boolean
}

const onPath =
  (...programs: string[]) =>
  () =>
    programs.every((p) => findExecutable(p) !== null)

/** Debian's archive keyring: mmdebstrap verifies bookworm's Release files with it (Debian hosts have it already). */
export const DEBIAN_KEYRING = '/usr/share/keyrings/debian-archive-keyring.gpg'

export const REQUIREMENTS: readonly HostRequirement[] = [
  {
    name: 'bubblewrap (bwrap)',
    neededBy: 'the namespace driver',
    packages: { apt: 'bubblewrap', dnf: 'bubblewrap', pacman: 'bubblewrap' },
    present: () => Boolean(process.env.KRUNBOX_BWRAP) || onPath('bwrap')(),
  },
  {
    name: 'mmdebstrap',
    neededBy: 'building the preset images (base, python, node)',
    packages: { apt: 'mmdebstrap', dnf: 'mmdebstrap', pacman: 'mmdebstrap' },
    present: onPath('mmdebstrap'),
  },
  {
    name: 'the Debian archive keyring',
    neededBy: 'building the preset images (verifies the archive)',
    packages: { apt: 'debian-archive-keyring', dnf: 'debian-keyring', pacman: 'debian-archive-keyring' },
    present: () => fs.existsSync(DEBIAN_KEYRING),
  },
  {
    name: 'zstd',
    neededBy: 'pulling OCI images with zstd layers',
    packages: { apt: 'zstd', dnf: 'zstd', pacman: 'zstd' },
    present: onPath('zstd'),
  },
  {
    name: 'npm',
    neededBy: 'building the node presets (Node comes from the npm registry)',
    packages: { apt: 'npm', dnf: 'npm', pacman: 'npm' },
    present: onPath('npm'),
  },
  {
    name: 'newuidmap/newgidmap',
    neededBy: 'building images and subordinate ids without root',
    packages: { apt: 'uidmap', dnf: 'shadow-utils', pacman: 'shadow' },
    present: onPath('newuidmap', 'newgidmap'),
  },
]

/** The requirement whose name contains `text` (a typo here is a bug: it throws). */
export function requirement(text: string): HostRequirement {
  const found = REQUIREMENTS.find((r) => r.name.includes(text))
  if (!found) throw new Error(`no host requirement named like ${text}`)
  return found
}

/** The host's package manager, from /etc/os-release (ID, then ID_LIKE), or null when none of the three. */
export function packageManager(osRelease = readOsRelease()): PackageManager | null {
  const ids = [osRelease.ID, ...(osRelease.ID_LIKE ?? '').split(/\s+/)].filter(Boolean)
  for (const id of ids) {
    if (['debian', 'ubuntu', 'linuxmint', 'pop', 'raspbian'].includes(id)) return 'apt'
    if (['fedora', 'rhel', 'centos', 'rocky', 'almalinux', 'amzn'].includes(id)) return 'dnf'
    if (['arch', 'manjaro', 'endeavouros'].includes(id)) return 'pacman'
  }
  return null
}

export function readOsRelease(file = '/etc/os-release'): Record<string, string> {
  const out: Record<string, string> = {}
  let text = ''
  try {
    text = fs.readFileSync(file, 'utf8')
  } catch {
    return out
  }
  for (const line of text.split('\n')) {
    const m = /^([A-Z_]+)=(.*)$/.exec(line.trim())
    if (m) out[m[1]] = m[2].replace(/^["']|["']$/g, '')
  }
  return out
}

/** The command that installs these packages with that manager. */
export function installCommand(manager: PackageManager, packages: string[]): string {
  const list = packages.join(' ')
  if (manager === 'apt') return `sudo apt-get install -y ${list}`
  if (manager === 'dnf') return `sudo dnf install -y ${list}`
  return `sudo pacman -S --needed ${list}`
}

/** How to install one requirement: on this host's manager when known, else all three. */
export function installHint(req: HostRequirement, manager = packageManager()): string {
  if (manager && req.packages[manager]) return installCommand(manager, [req.packages[manager]!])
  return (['apt', 'dnf', 'pacman'] as const)
    .filter((m) => req.packages[m])
    .map((m) => installCommand(m, [req.packages[m]!]))
    .join(', or ')
}

/**
 * Ubuntu 23.10+ (24.04 by default) lets unprivileged users make user namespaces only under an
 * AppArmor profile that allows it: kernel.apparmor_restrict_unprivileged_userns = 1.
 */
export function appArmorRestrictsUserns(file = '/proc/sys/kernel/apparmor_restrict_unprivileged_userns'): boolean {
  try {
    return fs.readFileSync(file, 'utf8').trim() === '1'
  } catch {
    return false
  }
}

/** The two known fixes of the AppArmor restriction, one per line. */
export const APPARMOR_USERNS_FIXES = [
  'allow them for every program: sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 ' +
    "(persist: echo 'kernel.apparmor_restrict_unprivileged_userns=0' | sudo tee /etc/sysctl.d/60-krunbox-userns.conf)",
  'or only for bwrap: a profile /etc/apparmor.d/bwrap containing ' +
    '"abi <abi/4.0>, include <tunables/global> profile bwrap /usr/bin/bwrap flags=(unconfined) { userns, }", ' +
    'loaded with sudo apparmor_parser -r /etc/apparmor.d/bwrap',
]

/** Subordinate ids a user other than root needs: 65536, as one image's owners span (mmdebstrap, OCI unpacks). */
export const SUBORDINATE_IDS_NEEDED = 65536

/**
 * Whether this host user has the subordinate uids and gids that building images without root
 * needs (and that give its sandboxes more than one id), read from /etc/subuid and /etc/subgid:
 * null for root, which needs none.
 */
export function subordinateIdsStatus(
  files = { uid: '/etc/subuid', gid: '/etc/subgid' },
): { user: string; uids: boolean; gids: boolean; fix: string } | null {
  const uid = process.getuid?.()
  if (uid === undefined || uid === 0) return null
  let user = String(uid)
  try {
    user = os.userInfo().username
  } catch {
    // no passwd entry: the files can still name the uid
  }
  const has = (file: string) => {
    let text = ''
    try {
      text = fs.readFileSync(file, 'utf8')
    } catch {
      return false
    }
    return text.split('\n').some((line) => {
      const [who, , count] = line.trim().split(':')
      return (who === user || who === String(uid)) && Number(count) >= SUBORDINATE_IDS_NEEDED
    })
  }
  // shadow's usermod adds both ranges on every distribution (Debian's uidmap, Fedora's and Arch's shadow).
  const fix = `sudo usermod --add-subuids 100000-165535 --add-subgids 100000-165535 ${user}`
  return { user, uids: has(files.uid), gids: has(files.gid), fix }
}
