/**
 * Building a root filesystem from Debian packages with mmdebstrap, in one of two variants:
 *
 * - extract (base): the packages are only unpacked, no maintainer script runs. A setup hook
 *   makes merged-/usr (bin, sbin, lib, lib64 as links into usr/), and an extract hook records
 *   which .deb files were unpacked and which Release files apt fetched.
 * - apt (every other preset and recipe): Debian's essential set and apt, then the packages, all
 *   installed by dpkg with every maintainer script run (alternatives, triggers, ldconfig, generated
 *   files) and dpkg's database kept. mmdebstrap's merged-usr hooks set /usr up the way
 *   debootstrap does; a setup hook writes the image's own dpkg and apt configuration before the
 *   first package (so dpkg leaves documentation out from the start, see debian-config.ts); an
 *   extract hook asks apt whether it can install the packages at all (a misspelt name fails in
 *   seconds, not after the essential set); local .deb files are installed last, by apt inside
 *   the tree; a customize hook records the Release files before mmdebstrap cleans apt's lists.
 *   The packages are read from dpkg's status later.
 *
 * The archive is given as sources lines (see debian-archive.ts), so the build fetches from the
 * archive whose state was checked; without any, mmdebstrap picks its default.
 *
 * Root runs mmdebstrap in its default (root) mode straight into the directory, in a mount
 * namespace of its own: the /proc, /sys and /dev it mounts into the tree go away with it even
 * when it is killed. Without root, `--mode=unshare` needs newuidmap/newgidmap (package uidmap)
 * and subordinate ids for the user in /etc/subuid and /etc/subgid; it writes a tarball that is
 * then extracted as the user (a directory written by unshare mode would be owned by the mapped
 * ids, 100000 and up).
 */
import fs from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { DEBIAN_KEYRING, installHint, requirement } from '../host-requirements.js'
import { findExecutable } from '../paths.js'
import { run } from './run.js'
import type { ArchiveSource } from './debian-archive.js'
import type { BuildMode } from './types.js'
import { errors } from '../protocol/errors.gen.js'

export const DEBS_RECORD = '.krunbox-debs'
export const RELEASES_RECORD = '.krunbox-releases'

/** mmdebstrap's own hooks that lay out merged-/usr as debootstrap does (without the usrmerge package and its perl). */
const MERGED_USR_HOOKS = '/usr/share/mmdebstrap/hooks/merged-usr'
/** Where local .deb files are inside the tree while apt installs them. */
const LOCAL_DEBS_DIR = '/tmp/krunbox-debs'

const MERGED_USR_HOOK = 'cd "$1" && for d in bin sbin lib lib64; do mkdir -p "usr/$d" && ln -s "usr/$d" "$d"; done'
/** Shell that records the Release files apt fetched into `lists` (their sha256, their Date lines) in `out` (archive.ts parses it). */
export function recordReleases(lists: string, out: string): string {
  return `cd ${lists} && { sha256sum -- *Release; grep -H -m1 '^Date:' -- *Release || true; } > ${out}`
}
const RELEASES_HOOK = recordReleases('"$1/var/lib/apt/lists"', `"$1/${RELEASES_RECORD}"`)
const RECORD_HOOK = `cd "$1" && ls var/cache/apt/archives > "$1/${DEBS_RECORD}" && ${RELEASES_HOOK}`

export function defaultBuildMode(): BuildMode {
  return process.getuid?.() === 0 ? 'root' : 'unshare'
}

async function hasSubordinateIds(file: string, user: string, uid: number): Promise<boolean> {
  const text = await fs.readFile(file, 'utf8').catch(() => '')
  return text.split('\n').some((line) => {
    const [who, , count] = line.split(':')
    return (who === user || who === String(uid)) && Number(count) >= 65536
  })
}

/** Everything a build in `mode` needs that is missing, in words a setup step can act on. */
export async function missingPrerequisites(mode: BuildMode): Promise<string[]> {
  const missing: string[] = []
  if (findExecutable('mmdebstrap') === null) missing.push(`mmdebstrap (${installHint(requirement('mmdebstrap'))})`)
  if ((await fs.stat(DEBIAN_KEYRING).catch(() => null)) === null)
    missing.push(`the Debian archive keyring ${DEBIAN_KEYRING} (${installHint(requirement('Debian archive keyring'))})`)
  if (mode === 'unshare' && process.getuid?.() !== 0) {
    if (findExecutable('newuidmap') === null || findExecutable('newgidmap') === null)
      missing.push(`newuidmap/newgidmap (${installHint(requirement('newuidmap'))})`)
    const { username, uid } = os.userInfo()
    if (!(await hasSubordinateIds('/etc/subuid', username, uid)))
      missing.push(
        `a range of 65536 subordinate uids for ${username} in /etc/subuid (sudo usermod --add-subuids 100000-165535 ${username})`,
      )
    if (!(await hasSubordinateIds('/etc/subgid', username, uid)))
      missing.push(
        `a range of 65536 subordinate gids for ${username} in /etc/subgid (sudo usermod --add-subgids 100000-165535 ${username})`,
      )
  }
  return missing
}

export interface MmdebstrapOptions {
  suite: string
  variant: 'extract' | 'apt'
  packages: string[]
  /** Install the packages' Recommends too. */
  recommends: boolean
  /** Host paths of local .deb files, installed after the packages (apt variant only). */
  debs: string[]
  /** Files written into the tree before any package (apt variant): path inside the tree -> content. */
  config: Record<string, string>
  /** Directory to create the root filesystem in (must not exist yet). */
  target: string
  /** Scratch directory for the tarball of unshare mode. */
  workDir: string
  mode: BuildMode
  /** The archive's dists (from the host's apt sources); empty: mmdebstrap's default archive. */
  sources: ArchiveSource[]
  onLine?: (line: string) => void
  /** Ends the build at once (mmdebstrap and everything it started are killed). */
  signal?: AbortSignal
}

/** A shell word: single-quoted, any single quote closed, escaped and reopened. */
function quoted(text: string): string {
  return `'${text.replace(/'/g, `'\\''`)}'`
}

/** A setup hook writing `files` (path inside the tree -> content) into the tree. */
function writeFilesHook(files: Record<string, string>): string {
  return Object.entries(files)
    .map(([inner, content]) => {
      const file = quoted(path.posix.join('/', inner))
      return `mkdir -p "$1"$(dirname ${file}) && printf %s ${quoted(content)} > "$1"${file}`
    })
    .join(' && ')
}

async function variantArgs(options: MmdebstrapOptions): Promise<string[]> {
  if (options.variant === 'extract')
    return ['--variant=extract', `--setup-hook=${MERGED_USR_HOOK}`, `--extract-hook=${RECORD_HOOK}`]
  // The packages are installed only after the essential set (a minute or more): ask apt whether
  // it can install them as soon as the package lists are there, so a misspelt name fails at once.
  const wanted = [...options.packages, ...options.debs].map(quoted).join(' ')
  const args = [
    '--variant=apt',
    `--extract-hook=APT_CONFIG="$MMDEBSTRAP_APT_CONFIG" apt-get --simulate --quiet=2 install ${wanted} > /dev/null`,
  ]
  // Without these hooks (an mmdebstrap older than 1.0) apt brings merged-/usr through the usrmerge package.
  if ((await fs.stat(MERGED_USR_HOOKS).catch(() => null)) !== null) args.push(`--hook-dir=${MERGED_USR_HOOKS}`)
  if (Object.keys(options.config).length > 0) args.push(`--setup-hook=${writeFilesHook(options.config)}`)
  if (options.debs.length > 0) {
    // Copied in by name (host paths are never part of the image), installed by apt inside the tree.
    const names = options.debs.map((deb, i) => `${LOCAL_DEBS_DIR}/${i}-${path.basename(deb)}`)
    const copies = options.debs.map((deb, i) => `cp -- ${quoted(deb)} "$1"${quoted(names[i])}`).join(' && ')
    args.push(
      `--customize-hook=mkdir -p "$1${LOCAL_DEBS_DIR}" && ${copies} && ` +
        `chroot "$1" apt-get install --yes ${names.map(quoted).join(' ')} && rm -rf "$1${LOCAL_DEBS_DIR}"`,
    )
  }
  args.push(`--customize-hook=${RELEASES_HOOK}`)
  return args
}

/**
 * The line that says why mmdebstrap failed: dpkg's report of a maintainer script that failed
 * (with the line after it, its exit status), else apt's first error ("Unable to locate package x").
 */
export function failureReason(tail: string): string {
  const lines = tail.split('\n')
  const dpkg = lines.findIndex((l) => l.startsWith('dpkg: error processing'))
  if (dpkg >= 0) return `${lines[dpkg]} ${lines[dpkg + 1]?.trim() ?? ''}`.trim()
  return lines.find((l) => l.startsWith('E: ')) ?? 'see output'
}

export async function runMmdebstrap(options: MmdebstrapOptions): Promise<void> {
  const missing = await missingPrerequisites(options.mode)
  if (missing.length > 0) {
    throw errors.imageBuildFailed({
      subject: `an image build in ${options.mode} mode`,
      problem: `cannot run: missing ${missing.join('; ')}`,
    })
  }
  const output = options.mode === 'root' ? options.target : path.join(options.workDir, 'rootfs.tar')
  const args = [
    '-v',
    `--mode=${options.mode}`,
    `--format=${options.mode === 'root' ? 'directory' : 'tar'}`,
    `--aptopt=APT::Install-Recommends "${options.recommends}"`,
    `--include=${options.packages.join(',')}`,
    ...(await variantArgs(options)),
    options.suite,
    output,
    // Only main: an image holds the same packages whatever components the host enables.
    ...options.sources.map((s) => `deb ${s.uri} ${s.dist} main`),
  ]
  // mmdebstrap's own temp dirs go inside the build dir, so a killed build leaves them only there
  // (and the next build sweeps the whole dir).
  const env = { ...process.env, TMPDIR: options.workDir }
  const result = await runInOwnMounts(args, { onLine: options.onLine, env, signal: options.signal })
  if (result.code !== 0) {
    const what = [...options.packages, ...options.debs.map((d) => path.basename(d))].join(',')
    throw errors.imageBuildFailed({
      subject: 'mmdebstrap',
      problem: `failed for ${what} (${options.suite}, exit ${result.code ?? result.signal}): ${failureReason(result.tail)}\n${result.tail}`,
    })
  }
  if (options.mode === 'unshare') {
    await fs.mkdir(options.target, { recursive: true })
    // Device nodes cannot be created without root, and sandboxes bring their own /dev.
    const untar = await run(
      'tar',
      ['-xf', output, '-C', options.target, '--preserve-permissions', '--no-same-owner', '--exclude=./dev/*'],
      {
        dieWithParent: true,
      },
    )
    if (untar.code !== 0)
      throw errors.imageBuildFailed({
        subject: `extracting mmdebstrap's tarball ${output}`,
        problem: `failed:\n${untar.tail}`,
      })
    await fs.rm(output, { force: true })
  }
}

/** mmdebstrap as root in a private mount namespace (unshare mode makes its own). */
function runInOwnMounts(
  args: string[],
  options: { onLine?: (line: string) => void; env: NodeJS.ProcessEnv; signal?: AbortSignal },
) {
  const unshare = process.getuid?.() === 0 ? findExecutable('unshare') : null
  if (unshare === null) return run('mmdebstrap', args, { ...options, dieWithParent: true })
  return run(unshare, ['--mount', '--propagation', 'private', '--', 'mmdebstrap', ...args], {
    ...options,
    dieWithParent: true,
  })
}
