/**
 * Custom images from a directory or a tarball. Both are copied into the cache (so the image
 * is immutable and content-addressed) after validation:
 *   S104 the path does not exist; S106 it cannot be read (or is not a readable archive);
 *   S105 it is not a root filesystem (no /bin/sh or /usr/bin/sh, nor /bin and /etc).
 * Device nodes are dropped and missing mount points (/proc, /sys, /dev, /tmp, /workspace)
 * are added; nothing else in the tree changes.
 */
import { createHash } from 'node:crypto'
import { createReadStream } from 'node:fs'
import fs from 'node:fs/promises'
import path from 'node:path'
import type { ProducedImage } from './ensure.js'
import type { ProgressReporter } from './progress.js'
import { sha256Hex } from './recipe.js'
import { looksLikeRootfs, notRootfsProblem, resolveInRoot } from './rootfs.js'
import { findExecutable } from '../paths.js'
import { run } from './run.js'
import { errors } from '../protocol/errors.gen.js'

export type CustomSourceKind = 'directory' | 'tarball'

const TARBALL_FLAGS: Array<[RegExp, string[]]> = [
  [/\.(tar\.zst|tzst)$/, ['--zstd']],
  [/\.(tar\.gz|tgz)$/, ['--gzip']],
  [/\.tar$/, []],
]

export function tarballFlags(file: string): string[] | null {
  for (const [pattern, flags] of TARBALL_FLAGS) if (pattern.test(file)) return flags
  return null
}

/** Checks the source path and says whether it is a directory or a tarball. */
export async function inspectSource(source: string): Promise<{ kind: CustomSourceKind; path: string }> {
  const abs = path.resolve(source)
  const stat = await fs.stat(abs).catch((err: NodeJS.ErrnoException) => err)
  if (stat instanceof Error) {
    if (stat.code === 'ENOENT' || stat.code === 'ENOTDIR')
      throw errors.imageSourceMissing({ source: `custom image source ${abs}` })
    throw errors.imageSourceUnreadable(
      { subject: `custom image source ${abs}`, problem: `is unreadable: ${stat.code}` },
      { cause: stat },
    )
  }
  if (stat.isDirectory()) {
    try {
      await fs.access(abs, fs.constants.R_OK | fs.constants.X_OK)
      await fs.readdir(abs)
    } catch (err) {
      throw errors.imageSourceUnreadable(
        { subject: `custom image directory ${abs}`, problem: `is unreadable: ${(err as NodeJS.ErrnoException).code}` },
        { cause: err },
      )
    }
    if (!(await looksLikeRootfs(abs)))
      throw errors.imageSourceNotRootfs({
        subject: `custom image directory ${abs}`,
        problem: await notRootfsProblem(abs),
      })
    return { kind: 'directory', path: abs }
  }
  if (stat.isFile() && tarballFlags(abs) !== null) {
    try {
      await fs.access(abs, fs.constants.R_OK)
    } catch (err) {
      throw errors.imageSourceUnreadable(
        { subject: `custom image tarball ${abs}`, problem: `is unreadable: ${(err as NodeJS.ErrnoException).code}` },
        { cause: err },
      )
    }
    return { kind: 'tarball', path: abs }
  }
  throw errors.imageSourceNotRootfs({
    subject: `custom image source ${abs}`,
    problem: 'is neither a directory nor a .tar, .tar.gz, .tgz or .tar.zst file',
  })
}

export async function fileSha256(file: string): Promise<string> {
  const hash = createHash('sha256')
  try {
    for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer)
  } catch (err) {
    throw errors.imageSourceUnreadable(
      { subject: `custom image tarball ${file}`, problem: `is unreadable: ${(err as NodeJS.ErrnoException).code}` },
      { cause: err },
    )
  }
  return hash.digest('hex')
}

/** The id of a tarball image: known before extraction, from the archive's bytes. */
export function tarballImageId(sha256: string): string {
  return sha256Hex(`krunbox-image:tarball:${sha256}`)
}

/** The id of a directory image: from the digest of the copied (and normalized) tree. */
export function directoryImageId(treeDigest: string): string {
  return sha256Hex(`krunbox-image:directory:${treeDigest}`)
}

const MOUNT_POINTS: Array<[string, number]> = [
  ['proc', 0o755],
  ['sys', 0o755],
  ['dev', 0o755],
  ['tmp', 0o1777],
  ['workspace', 0o777],
]

export async function addMissingMountPoints(root: string): Promise<void> {
  for (const [dir, mode] of MOUNT_POINTS) {
    const abs = await resolveInRoot(root, `/${dir}`)
    const exists = await fs.lstat(abs).then(
      () => true,
      () => false,
    )
    if (exists) continue
    await fs.mkdir(abs, { recursive: true })
    await fs.chmod(abs, mode)
  }
}

export function customProducer(kind: CustomSourceKind, source: string, sha256?: string) {
  return async (rootfs: string, _tmpDir: string, progress: ProgressReporter): Promise<ProducedImage> => {
    progress.report('extract', 0)
    await fs.mkdir(rootfs, { mode: 0o755 })
    const asRoot = process.getuid?.() === 0
    if (kind === 'directory') {
      // Reflinks make this nearly free where the filesystem supports them.
      const copied = await run('cp', ['-a', '--reflink=auto', '--', `${source}/.`, rootfs], { dieWithParent: true })
      if (copied.code !== 0)
        throw errors.imageSourceUnreadable({
          subject: `copying custom image directory ${source}`,
          problem: `failed (unreadable entries?):\n${copied.tail}`,
        })
    } else {
      const flags = tarballFlags(source) as string[]
      if (flags.includes('--zstd') && findExecutable('zstd') === null) {
        throw errors.imageBuildFailed({
          subject: 'zstd',
          problem: `is needed to extract ${source}: apt-get install zstd`,
        })
      }
      const args = [
        '-x',
        ...flags,
        '-f',
        source,
        '-C',
        rootfs,
        '--preserve-permissions',
        ...(asRoot ? [] : ['--no-same-owner']),
      ]
      const untar = await run('tar', args, { dieWithParent: true })
      if (untar.code !== 0)
        throw errors.imageSourceUnreadable({
          subject: `custom image tarball ${source}`,
          problem: `is not a readable archive:\n${untar.tail}`,
        })
    }
    progress.report('extract', 1)
    if (!(await looksLikeRootfs(rootfs))) {
      throw errors.imageSourceNotRootfs({
        subject: `custom image ${kind} ${source}`,
        problem: await notRootfsProblem(rootfs),
      })
    }
    await addMissingMountPoints(rootfs)
    return {
      kind,
      recipe: null,
      recipeDigest: null,
      source: sha256 === undefined ? { path: source } : { path: source, sha256 },
      archive: null,
      packages: [],
      buildMode: null,
    }
  }
}
