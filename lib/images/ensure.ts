/**
 * The one way an image gets into the cache: check, lock, build into a temporary directory,
 * write the manifest, rename into place, point the name at it.
 *
 * - A present manifest means a complete image: a second build is a no-op that touches nothing.
 * - Builders of the same id in other processes wait on the lock and then find the image.
 * - A build killed at any point leaves only its temporary directory, which the next build
 *   sweeps once the owner is dead.
 */
import fs from 'node:fs/promises'
import path from 'node:path'
import { isSandboxError } from '../errors.js'
import type { ImageCache } from './cache.js'
import { summarizeTree, type TreeSummary } from './digest.js'
import { acquireLock } from './lock.js'
import { ProgressReporter } from './progress.js'
import { dropHostHazards } from './rootfs.js'
import type { BuildResult, ImageManifest, NameRecord, ProgressListener } from './types.js'
import { errors } from '../protocol/errors.gen.js'

/** What a producer made in `<tmp>/rootfs`, minus what ensureImage measures itself. */
export type ProducedImage = Omit<
  ImageManifest,
  'schema' | 'name' | 'id' | 'sizeBytes' | 'fileCount' | 'treeDigest' | 'builtAt' | 'buildMs'
> & {
  /** The tree's summary when the producer computed it off the event loop (its tree has no device nodes nor setuid/setgid files). */
  tree?: TreeSummary
}

export interface EnsureOptions {
  name: string
  /** Known up front for recipes and tarballs; null when it derives from the produced tree (directories). */
  id: string | null
  /** The id once built, for producers without an id up front: from the tree digest or what the build recorded. */
  idFromTree?: (treeDigest: string, produced: ProducedImage) => string
  /** The name to point at the image; null for images reached another way (OCI references). */
  nameRecord: (id: string) => NameRecord | null
  /** Called where the name is written (under the image's lock when building): records a reference. */
  onPublished?: (id: string) => Promise<void>
  produce: (rootfs: string, tmpDir: string, progress: ProgressReporter) => Promise<ProducedImage>
  force?: boolean
  onProgress?: ProgressListener
}

/** Builds of one id running in this process, so concurrent calls share one build. */
const inflight = new Map<string, Promise<unknown>>()

export async function ensureImage(cache: ImageCache, options: EnsureOptions): Promise<BuildResult> {
  const key = options.id === null ? null : `${cache.root}\0${options.id}`
  if (key !== null) {
    for (let running = inflight.get(key); running !== undefined; running = inflight.get(key))
      await running.catch(() => undefined)
  }
  const work = lockBuildPublish(cache, options).catch((err: unknown) => {
    if (isSandboxError(err)) throw err
    throw errors.imageBuildFailed(
      { subject: `building image "${options.name}" in ${cache.root}`, problem: `failed: ${(err as Error).message}` },
      { cause: err },
    )
  })
  if (key !== null) {
    inflight.set(key, work)
    work.finally(() => inflight.get(key) === work && inflight.delete(key)).catch(() => undefined)
  }
  return work
}

async function existing(
  cache: ImageCache,
  id: string,
  options: EnsureOptions,
  progress: ProgressReporter,
): Promise<BuildResult | null> {
  const manifest = await cache.readManifest(id)
  if (manifest === null) return null
  await recordName(cache, options, id)
  progress.done()
  return { name: options.name, id, rootfs: cache.layout.rootfs(id), manifest, built: false }
}

async function recordName(cache: ImageCache, options: EnsureOptions, id: string): Promise<void> {
  const record = options.nameRecord(id)
  if (record !== null) await cache.writeName(record)
  await options.onPublished?.(id)
}

async function lockBuildPublish(cache: ImageCache, options: EnsureOptions): Promise<BuildResult> {
  const progress = new ProgressReporter(options.onProgress)
  const { id } = options
  if (id !== null && !options.force) {
    const found = await existing(cache, id, options, progress)
    if (found !== null) return found
  }
  const lock = id === null ? null : await acquireLock(cache.layout.lock(id))
  try {
    if (id !== null && !options.force) {
      const found = await existing(cache, id, options, progress)
      if (found !== null) return found
    }
    await cache.sweep()
    return await buildAndPublish(cache, options, progress)
  } finally {
    await lock?.release()
  }
}

async function buildAndPublish(
  cache: ImageCache,
  options: EnsureOptions,
  progress: ProgressReporter,
): Promise<BuildResult> {
  const started = Date.now()
  const tmpDir = await cache.createTmpDir()
  try {
    const rootfs = path.join(tmpDir, 'rootfs')
    const { tree: given, ...produced } = await options.produce(rootfs, tmpDir, progress)
    progress.report('finalize', 0)
    if (given === undefined) await dropHostHazards(rootfs)
    const tree = given ?? (await summarizeTree(rootfs))
    progress.report('finalize', 0.6)
    const id = options.id ?? (options.idFromTree as NonNullable<EnsureOptions['idFromTree']>)(tree.digest, produced)
    const manifest: ImageManifest = {
      schema: 1,
      name: options.name,
      id,
      ...produced,
      sizeBytes: tree.sizeBytes,
      fileCount: tree.fileCount,
      treeDigest: tree.digest,
      builtAt: new Date().toISOString(),
      buildMs: Date.now() - started,
    }
    await fs.writeFile(path.join(tmpDir, 'manifest.json'), JSON.stringify(manifest, null, 2))
    // Ids only known now (directories) are locked just for publication, so prune cannot
    // take the new image for an unreferenced one before its name points at it.
    const lock = options.id === null ? await acquireLock(cache.layout.lock(id)) : null
    try {
      if (options.force) await cache.removeImage(id)
      const published = await cache.publish(tmpDir, id)
      const final = published ? manifest : await cache.readManifest(id)
      if (final === null)
        throw errors.imageBuildFailed({ subject: `image ${id}`, problem: 'vanished while publishing it' })
      await recordName(cache, options, id)
      progress.done()
      return { name: options.name, id, rootfs: cache.layout.rootfs(id), manifest: final, built: published }
    } finally {
      await lock?.release()
    }
  } catch (err) {
    await cache.discard(tmpDir)
    if (isSandboxError(err)) throw err
    throw errors.imageBuildFailed(
      { subject: `building image "${options.name}"`, problem: `failed: ${(err as Error).message}` },
      { cause: err },
    )
  }
}
