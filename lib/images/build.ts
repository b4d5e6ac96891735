/**
 * Producing a root filesystem from Debian packages: mmdebstrap (extract for base, a configured
 * Debian system with apt for everything else), then the post-steps (trims, system files, busybox
 * applets, the Debian tree's finish, Node from the npm registry, the default Python virtual
 * environment, recipe files).
 */
import fs from 'node:fs/promises'
import path from 'node:path'
import type { ProducedImage } from './ensure.js'
import { parseFetchedReleases } from './archive.js'
import { parseChrootSources, type ArchiveSource, type ArchiveState } from './debian-archive.js'
import { installedPackages } from './dpkg-status.js'
import { buildLayerOverPreset } from './layer-build.js'
import { DPKG_CONFIG_FILE, dpkgConfig, PY3COMPILE_EXCLUDES_FILE, py3compileExcludes } from './debian-config.js'
import { runMmdebstrap } from './mmdebstrap.js'
import { downloadVerified, npmRegistry, unpackPackage, type NpmPin } from './npm-package.js'
import {
  addSystemFiles,
  applyTrims,
  finishDebianTree,
  installNode,
  linkBusyboxApplets,
  takeBuildRecords,
  writeCaBundle,
} from './poststeps.js'
import { createPythonVenv, venvEnv } from './python-venv.js'
import type { ProgressReporter } from './progress.js'
import { MmdebstrapProgress } from './progress.js'
import { recipeDigest, sourceState } from './recipe.js'
import { installTslab } from './tslab.js'
import { resolveInRoot } from './rootfs.js'
import { run } from './run.js'
import type { BuildMode, BuildRecipe, ImageKind, RecipeFile } from './types.js'
import { errors } from '../protocol/errors.gen.js'

export interface DebianBuild {
  kind: Extract<ImageKind, 'preset' | 'recipe'>
  recipe: BuildRecipe
  /** Host paths of the recipe's files, in the order of recipe.files. */
  files: RecipeFile[]
  /** Host paths of the recipe's local .deb files, in the order of recipe.debs. */
  debs: string[]
  /** The archive checked before the build (its id input), or null: mmdebstrap's default, the id taken from what it fetched. */
  archive: ArchiveState | null
  /** npm registry packages to install (Node, npm), pinned before the build. */
  npm: NpmPin[]
  mode: BuildMode
  /**
   * A recipe built as a layer over its preset (layer-build.ts): the preset's root filesystem and
   * the recipe's own packages, or undefined for a build of everything with mmdebstrap.
   */
  layer?: { lower: string; packages: string[] }
}

/** The build must have used the archive state its id was made from; a mirror push in between is retried. */
function checkSameArchive(checked: ArchiveState, fetched: ReadonlyArray<{ sha256: string }>): void {
  const expected = sourceState(checked.releases, []).releases.join(',')
  const got = sourceState(fetched, []).releases.join(',')
  if (expected !== got) {
    throw errors.imageBuildFailed(
      {
        subject: 'the archive',
        problem: `changed during the build (InRelease digests ${got || 'none'} instead of ${expected}); build again`,
      },
      { retryable: true },
    )
  }
}

/**
 * Downloads, verifies and unpacks the pinned npm packages (node-linux-*, npm) into the build
 * directory: their unpacked directories, or null for an image without Node.
 */
async function fetchNpmPackages(
  tmpDir: string,
  pins: readonly NpmPin[],
): Promise<{ node: string; npm: string | null } | null> {
  const node = pins.find((p) => p.name.startsWith('node-linux-'))
  const npm = pins.find((p) => p.name === 'npm')
  if (node === undefined) return null
  const unpacked = async (pin: NpmPin): Promise<string> => {
    const tarball = await downloadVerified(pin, tmpDir)
    const dir = path.join(tmpDir, 'npm-packages', pin.name)
    await unpackPackage(tarball, dir)
    await fs.rm(tarball, { force: true })
    return dir
  }
  const [nodeDir, npmDir] = await settledAll([
    unpacked(node),
    npm === undefined ? Promise.resolve(null) : unpacked(npm),
  ])
  return { node: nodeDir, npm: npmDir }
}

/** Promise.all that waits for every task before failing: none is left writing into a directory being discarded. */
async function settledAll<T extends readonly unknown[]>(tasks: { [K in keyof T]: Promise<T[K]> }): Promise<T> {
  const results = await Promise.allSettled(tasks)
  for (const r of results) if (r.status === 'rejected') throw r.reason
  return results.map((r) => (r as PromiseFulfilledResult<unknown>).value) as unknown as T
}

/** Copies a recipe file into the image, resolving the destination inside the image. */
async function copyRecipeFile(root: string, file: RecipeFile): Promise<void> {
  const target = await resolveInRoot(root, file.to, false)
  await fs.mkdir(path.dirname(target), { recursive: true })
  await fs.rm(target, { recursive: true, force: true })
  const copied = await run('cp', ['-a', '--no-preserve=ownership', '--', file.from, target])
  if (copied.code !== 0)
    throw errors.imageSourceUnreadable({
      subject: `copying recipe file ${file.from}`,
      problem: `into the image failed:\n${copied.tail}`,
    })
  if (file.mode !== undefined) await fs.chmod(target, file.mode)
}

export function debianProducer(build: DebianBuild) {
  if (build.layer !== undefined) return layerProducer(build, build.layer)
  return async (rootfs: string, tmpDir: string, progress: ProgressReporter): Promise<ProducedImage> => {
    progress.report('resolve', 0)
    const follower = new MmdebstrapProgress(progress)
    // Node's download runs while mmdebstrap does; a tarball that fails its checksum fails the
    // build at once (mmdebstrap is killed, not waited for), with the download's own error.
    const { variant } = build.recipe
    const npmFailed = new AbortController()
    const npmTask = fetchNpmPackages(tmpDir, build.npm).catch((err: unknown) => {
      npmFailed.abort()
      throw err
    })
    // The download's error comes first: settledAll reports the first task's.
    const [npmPackages] = await settledAll([
      npmTask,
      runMmdebstrap({
        suite: build.recipe.suite,
        variant,
        packages: build.recipe.packages,
        recommends: build.recipe.recommends,
        debs: build.debs,
        config:
          variant === 'apt'
            ? { [DPKG_CONFIG_FILE]: dpkgConfig(), [PY3COMPILE_EXCLUDES_FILE]: py3compileExcludes() }
            : {},
        target: rootfs,
        workDir: tmpDir,
        mode: build.mode,
        sources: build.archive?.sources ?? [],
        onLine: (line) => follower.line(line),
        signal: npmFailed.signal,
      }),
    ])
    progress.report('trim', 0)
    const records = await takeBuildRecords(rootfs, variant)
    if (build.archive !== null) checkSameArchive(build.archive, records.fetched)
    // What mmdebstrap wrote for apt: the archive the next `images build` checks (and, in a
    // Debian tree, where apt inside finds its packages).
    const sources = await treeSources(rootfs)
    await applyTrims(rootfs, build.recipe.trims)
    progress.report('trim', 0.5)
    await addSystemFiles(rootfs)
    await linkBusyboxApplets(rootfs)
    // A Debian tree's bundle is ca-certificates' own (its maintainer script made it).
    if (variant === 'extract') await writeCaBundle(rootfs)
    else await finishDebianTree(rootfs)
    if (npmPackages !== null) await installNode(rootfs, npmPackages.node, npmPackages.npm)
    if (build.recipe.tslab !== undefined) await installTslab(rootfs, tmpDir, await npmRegistry())
    for (const file of build.files) await copyRecipeFile(rootfs, file)
    progress.report('trim', 1)
    if (build.recipe.pythonVenv) {
      progress.report('compile', 0)
      await createPythonVenv(rootfs)
      progress.report('compile', 1)
    }
    return produced(build, { sources, fetched: records.fetched }, records.packages)
  }
}

/** The sources apt has in the tree (mmdebstrap wrote them from the build's archive). */
async function treeSources(rootfs: string): Promise<ArchiveSource[]> {
  return parseChrootSources(
    await fs.readFile(await resolveInRoot(rootfs, '/etc/apt/sources.list'), 'utf8').catch(() => ''),
  )
}

/** What a Debian build made, for its manifest. */
function produced(
  build: DebianBuild,
  archive: NonNullable<ProducedImage['archive']>,
  packages: ProducedImage['packages'],
): ProducedImage {
  return {
    kind: build.kind,
    recipe: build.recipe,
    recipeDigest: recipeDigest(build.recipe),
    source: null,
    archive,
    npm: build.npm.map((p) => ({ ...p })),
    packages,
    buildMode: build.mode,
    ...(build.recipe.pythonVenv && { env: venvEnv() }),
  }
}

/**
 * A recipe over its built preset: apt adds the recipe's packages in a layer over the preset's
 * tree, whose untouched files the image links instead of copying; then the recipe's files.
 * Node, tslab and the virtual environment are the preset's.
 */
function layerProducer(build: DebianBuild, layer: NonNullable<DebianBuild['layer']>) {
  return async (rootfs: string, tmpDir: string, progress: ProgressReporter): Promise<ProducedImage> => {
    progress.report('resolve', 0)
    const releases = await buildLayerOverPreset({
      lower: layer.lower,
      packages: layer.packages,
      recommends: build.recipe.recommends,
      debs: build.debs,
      workDir: tmpDir,
      target: rootfs,
      onLine: (line) => {
        if (line.startsWith('Get:')) progress.report('download', 0.5)
        else if (line.startsWith('Unpacking ')) progress.report('extract', 0.3)
        else if (line.startsWith('Setting up ')) progress.report('extract', 0.7)
      },
    })
    progress.report('trim', 0)
    const fetched = parseFetchedReleases(releases)
    if (build.archive !== null) checkSameArchive(build.archive, fetched)
    await applyTrims(rootfs, build.recipe.trims)
    for (const file of build.files) await copyRecipeFile(rootfs, file)
    progress.report('trim', 1)
    return produced(build, { sources: await treeSources(rootfs), fetched }, await installedPackages(rootfs))
  }
}
