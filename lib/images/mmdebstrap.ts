/**
 * Extracting Debian packages into a directory with `mmdebstrap --variant=extract`.
 *
 * extract only unpacks the requested packages and their dependencies: no maintainer script
 * runs. Two hooks make up for what is missing or needed:
 * - setup: merged-/usr (bin, sbin, lib, lib64 as links into usr/), as bookworm's installer
 *   would have made them, so /bin/sh and /usr/bin/sh are the same file and the dynamic
 *   loader's /lib64 path resolves;
 * - extract: record which .deb files were unpacked and which Release files apt fetched,
 *   before mmdebstrap cleans its cache (dpkg's status stays empty with extract).
 * The archive is given as sources lines (see debian-archive.ts), so the build fetches from the
 * archive whose state was checked; without any, mmdebstrap picks its default.
 *
 * Root runs mmdebstrap in its default (root) mode straight into the directory. Without root,
 * `--mode=unshare` needs newuidmap/newgidmap (package uidmap) and subordinate ids for the user
 * in /etc/subuid and /etc/subgid; it writes a tarball that is then extracted as the user
 * (a directory written by unshare mode would be owned by the mapped ids, 100000 and up).
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

const MERGED_USR_HOOK = 'cd "$1" && for d in bin sbin lib lib64; do mkdir -p "usr/$d" && ln -s "usr/$d" "$d"; done'
const RECORD_HOOK =
  `cd "$1" && ls var/cache/apt/archives > "$1/${DEBS_RECORD}" && cd var/lib/apt/lists && ` +
  `{ sha256sum -- *Release; grep -H -m1 '^Date:' -- *Release || true; } > "$1/${RELEASES_RECORD}"`

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

export interface ExtractOptions {
  suite: string
  packages: string[]
  /** Directory to create the root filesystem in (must not exist yet). */
  target: string
  /** Scratch directory for the tarball of unshare mode. */
  workDir: string
  mode: BuildMode
  /** The archive's dists (from the host's apt sources); empty: mmdebstrap's default archive. */
  sources: ArchiveSource[]
  onLine?: (line: string) => void
}

export async function extractPackages(options: ExtractOptions): Promise<void> {
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
    '--variant=extract',
    `--mode=${options.mode}`,
    `--format=${options.mode === 'root' ? 'directory' : 'tar'}`,
    `--include=${options.packages.join(',')}`,
    `--setup-hook=${MERGED_USR_HOOK}`,
    `--extract-hook=${RECORD_HOOK}`,
    options.suite,
    output,
    // Only main: an image holds the same packages whatever components the host enables.
    ...options.sources.map((s) => `deb ${s.uri} ${s.dist} main`),
  ]
  // mmdebstrap's own temp dirs go inside the build dir, so a killed build leaves them only there
  // (and the next build sweeps the whole dir).
  const env = { ...process.env, TMPDIR: options.workDir }
  const result = await run('mmdebstrap', args, { onLine: options.onLine, dieWithParent: true, env })
  if (result.code !== 0) {
    // apt's first "E:" line usually says it all ("Unable to locate package x").
    const reason = result.tail.split('\n').find((l) => l.startsWith('E: ')) ?? 'see output'
    throw errors.imageBuildFailed({
      subject: 'mmdebstrap',
      problem: `failed for ${options.packages.join(',')} (${options.suite}, exit ${result.code ?? result.signal}): ${reason}\n${result.tail}`,
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
