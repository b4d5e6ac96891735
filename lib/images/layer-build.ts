/**
 * A recipe on a Debian preset, built as a layer over the preset's tree instead of a second
 * mmdebstrap of everything (root only; a rootless build has no overlay over a tree of other
 * owners, and builds the whole recipe as before):
 *
 *  1. In a mount and PID namespace of its own (gone with it, even when it is killed), the
 *     preset's tree is the read-only lower layer of an overlay; apt inside it installs the
 *     recipe's packages (and local .debs) with every maintainer script run, and then waits.
 *  2. While it waits, the image's tree is made from the overlay's merged view: every entry the
 *     build did not touch is a hard link to the preset's own file (no copy: ten recipes on one
 *     preset cost their own packages only), every entry it wrote is moved out of the upper
 *     layer. Deletions and replaced directories are what the merged view shows, so no whiteout
 *     or opaque marker has to be read. Nothing is ever written through a link: the preset's
 *     files are only linked, and whatever replaces one is a new file.
 *
 * The merged view is read through /proc/<pid>/root of the namespace's first process, so it is
 * never mounted where the host's own processes see it.
 */
import type { ChildProcess } from 'node:child_process'
import fs from 'node:fs/promises'
import path from 'node:path'
import { failureReason, recordReleases } from './mmdebstrap.js'
import { run } from './run.js'
import { errors } from '../protocol/errors.gen.js'

/** The line the build prints once the merged view is complete, before it waits for stdin to close. */
const READY = 'krunbox-layer-ready'
/** Where local .deb files are inside the overlay while apt installs them (on its /tmp tmpfs, never in the layer). */
const LOCAL_DEBS_DIR = '/tmp/krunbox-debs'
/** The Release files apt fetched (mmdebstrap.ts recordReleases, as a preset build records them). */
const LAYER_RELEASES_RECORD = 'releases'
/** What apt says when its _apt user cannot be used and it downloads as root instead. */
const UNSANDBOXED = 'Download is performed unsandboxed as root'

export interface LayerBuildOptions {
  /** The preset image's root filesystem: the read-only lower layer. */
  lower: string
  /** The recipe's own packages (the preset's are installed already). */
  packages: string[]
  recommends: boolean
  /** Host paths of local .deb files, installed after the packages. */
  debs: string[]
  /** The build's directory: the layer's upper, work and merged directories go here. */
  workDir: string
  /** Where the image's tree is made (must not exist). */
  target: string
  onLine?: (line: string) => void
}

/** The build inside the namespace: $1 lower, $2 build dir, $3 true|false (Recommends), $4 the packages (space-separated). */
const SCRIPT = String.raw`set -eu
lower=$1 dir=$2 recommends=$3 packages=$4
m=$dir/merged
mount -t overlay overlay -o "lowerdir=$lower,upperdir=$dir/upper,workdir=$dir/work,redirect_dir=off,metacopy=off,index=off,xino=off" "$m"
mount -t proc -o nosuid,nodev,noexec proc "$m/proc"
mount -t tmpfs -o mode=0755,nosuid tmpfs "$m/dev"
for d in null zero full random urandom tty; do : > "$m/dev/$d"; mount --bind "/dev/$d" "$m/dev/$d"; done
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$m/tmp"
mount -t tmpfs -o mode=0755,nosuid,nodev tmpfs "$m/run"
# apt resolves and reaches the archive as this host does; the image's own files stay as they are.
# (These mounts are BUILD_MOUNTS: the image takes the preset's entries there.)
for f in resolv.conf hosts; do
  [ -f "$m/etc/$f" ] || : > "$m/etc/$f"
  mount --bind "/etc/$f" "$m/etc/$f" && mount -o remount,bind,ro "$m/etc/$f"
done
# No service starts during the build (mmdebstrap does the same).
printf '#!/bin/sh\nexit 101\n' > "$m/usr/sbin/policy-rc.d"; chmod 0755 "$m/usr/sbin/policy-rc.d"
export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 PATH=/usr/sbin:/usr/bin:/sbin:/bin
# apt downloads as its _apt user, as the preset build's apt does on the host: the image's own
# setting (root, for apt inside a sandbox) is overridden, and its download dirs are _apt's
# for the build alone.
partial="/var/lib/apt/lists/partial /var/cache/apt/archives/partial"
owner=$(chroot "$m" stat -c %u:%g /var/lib/apt/lists/partial)
# shellcheck disable=SC2086 # two paths
chroot "$m" chown _apt:root $partial
chroot "$m" apt-get -o APT::Sandbox::User=_apt update -q
(${recordReleases('"$m/var/lib/apt/lists"', `"$dir/${LAYER_RELEASES_RECORD}"`)})
set -- -y -q -o APT::Sandbox::User=_apt -o "APT::Install-Recommends=$recommends"
# shellcheck disable=SC2086 # one word per package
[ -z "$packages" ] || chroot "$m" apt-get install "$@" $packages
if [ -d "$dir/debs" ]; then
  mkdir "$m$LOCAL_DEBS" && mount --bind "$dir/debs" "$m$LOCAL_DEBS"
  chroot "$m" sh -c 'exec apt-get install "$@" '"$LOCAL_DEBS"'/*.deb' sh "$@"
fi
rm -f "$m/usr/sbin/policy-rc.d"
chroot "$m" apt-get clean
# shellcheck disable=SC2086 # two paths
chroot "$m" chown "$owner" $partial
find "$m/var/lib/apt/lists" -maxdepth 1 -type f ! -name lock -delete
echo ${READY}
read -r _ || true
`

/** The build's own entries in workDir, removed once the image's tree is made. */
const SCRATCH = ['upper', 'work', 'merged', 'debs', LAYER_RELEASES_RECORD]

/**
 * Builds the layer and makes the image's tree at options.target; resolves with the record of
 * the Release files apt fetched. Throws S102 (apt's reason and output tail) when apt fails.
 */
export async function buildLayerOverPreset(options: LayerBuildOptions): Promise<string> {
  try {
    await runLayerBuild(options)
    return await fs.readFile(path.join(options.workDir, LAYER_RELEASES_RECORD), 'utf8')
  } finally {
    for (const name of SCRATCH) await fs.rm(path.join(options.workDir, name), { recursive: true, force: true })
  }
}

async function runLayerBuild(options: LayerBuildOptions): Promise<void> {
  const dir = options.workDir
  for (const sub of ['upper', 'work', 'merged']) await fs.mkdir(path.join(dir, sub), { mode: 0o700 })
  // The overlay's root is the upper directory: it must look like the preset's root.
  await fs.chmod(path.join(dir, 'upper'), (await fs.stat(options.lower)).mode & 0o7777)
  await copyDebs(options.debs, dir)
  const env = { PATH: process.env.PATH, LOCAL_DEBS: LOCAL_DEBS_DIR }
  // dieWithParent: a PID namespace whose first process dies with this one, and everything in it.
  const args = ['--mount', '--propagation', 'private', '--', 'sh', '-c', SCRIPT, 'sh', options.lower, dir]
  args.push(options.recommends ? 'true' : 'false', options.packages.join(' '))
  let child: ChildProcess | undefined
  let materialized: Promise<void> | null = null
  const unsandboxed: { line?: string } = {}
  const refuse = new AbortController()
  const result = await run('unshare', args, {
    env,
    dieWithParent: true,
    stdin: 'pipe',
    signal: refuse.signal,
    onSpawn: (c) => (child = c),
    onLine: (line) => {
      if (line.includes(UNSANDBOXED)) {
        // apt fell back to downloading as root: refused, the tree is never made.
        unsandboxed.line ??= line
        refuse.abort()
      }
      if (line === READY && materialized === null && child?.pid !== undefined) {
        const started = child
        materialized = materialize(child.pid, options).finally(() => started.stdin?.end())
        materialized.catch(() => {})
      }
      options.onLine?.(line)
    },
  })
  if (unsandboxed.line !== undefined)
    throw errors.imageBuildFailed({
      subject: 'apt in the layer over the preset',
      problem: `would download as root, outside its _apt sandbox: ${unsandboxed.line.slice(0, 300)}`,
    })
  if (materialized !== null) await materialized
  if (materialized === null || result.code !== 0) {
    throw errors.imageBuildFailed({
      subject: `apt in the layer over the preset`,
      problem: `failed for ${[...options.packages, ...options.debs.map((d) => path.basename(d))].join(',')} (exit ${result.code ?? result.signal}): ${failureReason(result.tail)}\n${result.tail}`,
    })
  }
}

/** Local .debs are copied into the build dir as <n>.deb (host paths and names never reach the image), bound into the overlay's /tmp. */
async function copyDebs(debs: string[], dir: string): Promise<void> {
  if (debs.length === 0) return
  const inside = path.join(dir, 'debs')
  await fs.mkdir(inside, { mode: 0o700 })
  for (const [i, deb] of debs.entries()) await fs.copyFile(deb, path.join(inside, `${i}.deb`))
}

/**
 * The build's shell, whose root sees the merged view: the child of the guard's `unshare --pid
 * --fork` (run.ts), or the started process itself where no PID namespace was made.
 */
async function buildShell(started: number): Promise<number> {
  const children = await fs.readFile(`/proc/${started}/task/${started}/children`, 'utf8')
  const pid = Number(children.trim().split(/\s+/)[0])
  return Number.isInteger(pid) && pid > 0 ? pid : started
}

async function materialize(started: number, options: LayerBuildOptions): Promise<void> {
  const merged = path.join(`/proc/${await buildShell(started)}/root`, options.workDir, 'merged')
  const upper = path.join(options.workDir, 'upper')
  // Owned by the builder, like a tree mmdebstrap makes: the image's owners are shifted into the
  // sandbox ids at its first use (images/ownership.ts), which skips a tree whose root is shifted,
  // and the packages' new files are not yet, although the preset's linked ones may be.
  await fs.mkdir(options.target)
  await fs.chmod(options.target, (await fs.stat(options.lower)).mode & 0o7777)
  await makeDir(merged, upper, options.lower, options.target)
  await copyDirTimes(merged, options.target)
}

/**
 * What the build mounts over the overlay (SCRIPT): the merged view shows the mount there, not the
 * image, whose entry (if any) is the preset's untouched.
 */
const BUILD_MOUNTS = new Set(['proc', 'dev', 'tmp', 'run', 'etc/resolv.conf', 'etc/hosts'])

/**
 * Fills target with what merged holds: from upper when the build wrote it, else linked from
 * lower. A directory the build never wrote is the preset's whole: read from lower itself.
 */
async function makeDir(merged: string, upper: string | null, lower: string, target: string, rel = ''): Promise<void> {
  const entries = await fs.readdir(merged, { withFileTypes: true })
  await Promise.all(
    entries.map(async (entry) => {
      const name = entry.name
      const dest = path.join(target, name)
      if (upper !== null && BUILD_MOUNTS.has(path.posix.join(rel, name))) {
        const own = await fs.lstat(path.join(lower, name)).catch(() => null)
        if (own !== null) await fromLower(path.join(lower, name), dest, own.isDirectory())
        return
      }
      const written = upper === null ? null : await fs.lstat(path.join(upper, name)).catch(() => null)
      if (written === null) return fromLower(path.join(lower, name), dest, entry.isDirectory())
      if (!entry.isDirectory()) return fs.rename(path.join(upper!, name), dest)
      await fs.mkdir(dest)
      await copyDirMeta(path.join(merged, name), dest)
      await makeDir(
        path.join(merged, name),
        path.join(upper!, name),
        path.join(lower, name),
        dest,
        path.posix.join(rel, name),
      )
      await copyDirTimes(path.join(merged, name), dest)
    }),
  )
}

/** An entry of the preset the build did not touch: linked, a directory made anew with its entries linked. */
async function fromLower(source: string, dest: string, isDirectory: boolean): Promise<void> {
  if (!isDirectory) return fs.link(source, dest)
  await fs.mkdir(dest)
  await copyDirMeta(source, dest)
  await makeDir(source, null, source, dest)
  await copyDirTimes(source, dest)
}

async function copyDirMeta(from: string, to: string): Promise<void> {
  const st = await fs.lstat(from)
  await fs.lchown(to, st.uid, st.gid)
  await fs.chmod(to, st.mode & 0o7777)
}

async function copyDirTimes(from: string, to: string): Promise<void> {
  const st = await fs.lstat(from)
  await fs.utimes(to, st.atime, st.mtime)
}
