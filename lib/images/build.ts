/**
 * Producing a root filesystem from Debian packages: mmdebstrap --variant=extract, then the
 * post-steps (trims, system files, busybox applets, recipe files, Python byte-compilation).
 */
import fs from 'node:fs/promises'
import path from 'node:path'
import { SandboxError } from '../errors.js'
import type { ProducedImage } from './ensure.js'
import { extractPackages } from './mmdebstrap.js'
import { addSystemFiles, applyTrims, compilePython, linkBusyboxApplets, takeBuildRecords, writeCaBundle } from './poststeps.js'
import type { ProgressReporter } from './progress.js'
import { MmdebstrapProgress } from './progress.js'
import { recipeDigest } from './recipe.js'
import { resolveInRoot } from './rootfs.js'
import { run } from './run.js'
import type { BuildMode, BuildRecipe, ImageKind, RecipeFile, ReleaseFile } from './types.js'
import { MESSAGES } from '../protocol/contract.gen.js'

export interface DebianBuild {
  kind: Extract<ImageKind, 'preset' | 'recipe'>
  recipe: BuildRecipe
  /** Host paths of the recipe's files, in the order of recipe.files. */
  files: RecipeFile[]
  hostReleases: ReleaseFile[]
  mode: BuildMode
}

/** Copies a recipe file into the image, resolving the destination inside the image. */
async function copyRecipeFile(root: string, file: RecipeFile): Promise<void> {
  const target = await resolveInRoot(root, file.to, false)
  await fs.mkdir(path.dirname(target), { recursive: true })
  await fs.rm(target, { recursive: true, force: true })
  const copied = await run('cp', ['-a', '--no-preserve=ownership', '--', file.from, target])
  if (copied.code !== 0) throw new SandboxError('S106', MESSAGES.imageSourceUnreadable({ subject: `copying recipe file ${file.from}`, problem: `into the image failed:\n${copied.tail}` }))
  if (file.mode !== undefined) await fs.chmod(target, file.mode)
}

export function debianProducer(build: DebianBuild) {
  return async (rootfs: string, tmpDir: string, progress: ProgressReporter): Promise<ProducedImage> => {
    progress.report('resolve', 0)
    const follower = new MmdebstrapProgress(progress)
    await extractPackages({
      suite: build.recipe.suite,
      packages: build.recipe.packages,
      target: rootfs,
      workDir: tmpDir,
      mode: build.mode,
      onLine: (line) => follower.line(line),
    })
    progress.report('trim', 0)
    const records = await takeBuildRecords(rootfs)
    await applyTrims(rootfs, build.recipe.trims)
    progress.report('trim', 0.5)
    await addSystemFiles(rootfs)
    await linkBusyboxApplets(rootfs)
    await writeCaBundle(rootfs)
    for (const file of build.files) await copyRecipeFile(rootfs, file)
    progress.report('trim', 1)
    if (build.recipe.compilePython) {
      progress.report('compile', 0)
      await compilePython(rootfs)
      progress.report('compile', 1)
    }
    return {
      kind: build.kind,
      recipe: build.recipe,
      recipeDigest: recipeDigest(build.recipe),
      source: null,
      archive: { hostLists: build.hostReleases, fetched: records.fetched },
      packages: records.packages,
      buildMode: build.mode,
    }
  }
}
