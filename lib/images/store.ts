/** The public face of the image cache: resolve, build, register, list, remove, prune. */
import { debianProducer } from './build.js'
import type { SandboxError } from '../errors.js'
import { describe, optionalBoolean, optionalString, optionsObject } from '../options.js'
import { ImageCache, NAME_PATTERN, validateImageName } from './cache.js'
import { customProducer, directoryImageId, fileSha256, inspectSource, tarballImageId } from './custom.js'
import { summarizeTree } from './digest.js'
import { candidateUris, currentArchiveState, DEFAULT_APT_SOURCES, readAptSources } from './debian-archive.js'
import { ensureImage } from './ensure.js'
import { nodePackageName, npmRegistry, resolveNpmPackage, type NpmPin } from './npm-package.js'
import { defaultImageCacheDir } from './layout.js'
import fs from 'node:fs/promises'
import path from 'node:path'
import { acquireLock, readLockOwner } from './lock.js'
import { isProcessAlive } from './liveness.js'
import { defaultBuildMode } from './mmdebstrap.js'
import { DEFAULT_SUITE, PRESETS, isPresetName, type PresetName } from './presets.js'
import { customRecipe, imageId, presetRecipe, recipeDigest, sourceState, validateRecipe } from './recipe.js'
import { BlobStore } from './oci/blobs.js'
import { importArchive } from './oci/import.js'
import { pullImage, PULL_POLICIES, type PullPolicy } from './oci/pull.js'
import { looksLikeReference, parseReference } from './oci/reference.js'
import { RefStore } from './oci/refs.js'
import { splitPin } from './pin.js'
import { removeUnlessUsed, sweepUsers, useImage, type ImageUse } from './users.js'
import { summarizeTreeOffLoop } from './oci/extract.js'
import { unpackMapping } from './oci/userns.js'
import type {
  BuildMode,
  BuildRecipe,
  BuildResult,
  ImageListEntry,
  ImageRecipe,
  ImageSource,
  NameRecord,
  ProgressListener,
  RecipeFile,
  ResolvedImage,
} from './types.js'
import { errors } from '../protocol/errors.gen.js'

/** A recipe built as a layer over its preset: the preset's tree and id, and the recipe's own packages. */
interface RecipeLayer {
  lower: string
  packages: string[]
  presetId: string
}

export interface ImageStoreOptions {
  /** Cache root; default `${XDG_CACHE_HOME:-$HOME/.cache}/krunbox/images`. */
  cacheDir?: string
  /** Debian suite of the presets; default trixie (Debian's current stable). Part of every image id. */
  suite?: string
  /** 'root' (default as root) or 'unshare' (default otherwise; needs uidmap and subordinate ids). */
  buildMode?: BuildMode
  /**
   * The host's apt sources (files and directories, one-line or deb822), where the Debian
   * archive's URIs are read; default /etc/apt/sources.list and /etc/apt/sources.list.d.
   */
  aptSources?: string[]
  /** OCI registries (host[:port]) spoken to over plain HTTP; loopback ones always are. */
  insecureRegistries?: string[]
  /** Pull policy for OCI references: 'if-missing' (default), 'always' or 'never'. */
  pullPolicy?: PullPolicy
  /**
   * Bounds on an unpacked OCI image: bytes of its uncompressed layer streams (default 32 GiB, and
   * never more than half the cache filesystem's free space at the unpack's start) and entries
   * (default 2 000 000).
   */
  unpackLimits?: { maxBytes?: number; maxEntries?: number }
}

export interface PullImageOptions {
  policy?: PullPolicy
  onProgress?: ProgressListener
}

function pullPolicyOption(value: unknown, name: string): PullPolicy | undefined {
  if (value === undefined) return undefined
  if (typeof value !== 'string' || !PULL_POLICIES.includes(value as PullPolicy)) {
    throw errors.badArgument({
      subject: name,
      problem: `must be one of ${PULL_POLICIES.join(', ')}, got ${describe(value)}`,
    })
  }
  return value as PullPolicy
}

export interface BuildOptions {
  onProgress?: ProgressListener
  /** Rebuild even if the image exists, replacing its tree in place (stop the sandboxes running on it first). */
  force?: boolean
}

export interface PruneOptions {
  /** Ids still in use (by live sandboxes): never removed. */
  keep?: Iterable<string>
}

/** Build and register options, checked before anything is built. */
function buildOptions(options: unknown): void {
  const o = optionsObject(options, 'build options', ['force', 'onProgress'])
  optionalBoolean(o.force, 'force', false)
  if (o.onProgress !== undefined && typeof o.onProgress !== 'function')
    throw errors.badArgument({ subject: 'onProgress', problem: `must be a function, got ${describe(o.onProgress)}` })
}

function isRecipe(source: ImageSource): source is ImageRecipe {
  return typeof source === 'object' && source !== null && 'base' in source
}

/** What the create pipeline may do with a store beyond its public face. */
interface ImageStoreControl {
  /** Marks image `id` as the one sandbox `sandboxId` boots on (users.ts); null when it is no longer in the cache. */
  useImage(store: ImageStore, id: string, sandboxId: string): Promise<ImageUse | null>
}

let control!: ImageStoreControl

export class ImageStore {
  readonly cacheDir: string
  readonly suite: string
  readonly buildMode: BuildMode
  private readonly cache: ImageCache
  private readonly aptSources: readonly string[]
  /**
   * What resolve() found per name, with its name record's and manifest's stamps: while both
   * files are the same, so is the image (two stats per create instead of reading and parsing both).
   */
  private readonly resolved = new Map<string, { image: ResolvedImage; stamp: string }>()

  static {
    control = {
      useImage: async (store, id, sandboxId) => {
        await store.cache.own()
        return useImage(store.cache.layout, id, sandboxId)
      },
    }
  }

  constructor(options: ImageStoreOptions = {}) {
    optionsObject(options, 'image store options', [
      'cacheDir',
      'suite',
      'buildMode',
      'aptSources',
      'insecureRegistries',
      'pullPolicy',
      'unpackLimits',
    ])
    if (options.cacheDir !== undefined && (typeof options.cacheDir !== 'string' || options.cacheDir === '')) {
      throw errors.badArgument({
        subject: 'cacheDir',
        problem: `must be a non-empty path, got ${JSON.stringify(options.cacheDir)}`,
      })
    }
    if (options.suite !== undefined && !/^[a-z][a-z0-9-]*$/.test(options.suite)) {
      throw errors.badArgument({
        subject: 'suite',
        problem: `must be a Debian suite name such as bookworm, got ${JSON.stringify(options.suite)}`,
      })
    }
    if (options.buildMode !== undefined && options.buildMode !== 'root' && options.buildMode !== 'unshare') {
      throw errors.badArgument({
        subject: 'buildMode',
        problem: `must be "root" or "unshare", got ${JSON.stringify(options.buildMode)}`,
      })
    }
    this.cacheDir = options.cacheDir ?? defaultImageCacheDir()
    this.suite = options.suite ?? DEFAULT_SUITE
    this.buildMode = options.buildMode ?? defaultBuildMode()
    if (
      options.aptSources !== undefined &&
      (!Array.isArray(options.aptSources) || options.aptSources.some((p) => typeof p !== 'string' || p === ''))
    ) {
      throw errors.badArgument({
        subject: 'aptSources',
        problem: `must be a list of paths, got ${describe(options.aptSources)}`,
      })
    }
    this.aptSources = [...(options.aptSources ?? DEFAULT_APT_SOURCES)]
    this.cache = new ImageCache(this.cacheDir)
    if (
      options.insecureRegistries !== undefined &&
      (!Array.isArray(options.insecureRegistries) || options.insecureRegistries.some((r) => typeof r !== 'string'))
    ) {
      throw errors.badArgument({
        subject: 'insecureRegistries',
        problem: `must be a list of host[:port] strings, got ${describe(options.insecureRegistries)}`,
      })
    }
    this.insecureRegistries = [...(options.insecureRegistries ?? [])]
    this.pullPolicy = pullPolicyOption(options.pullPolicy, 'pullPolicy') ?? 'if-missing'
    const limits = optionsObject(options.unpackLimits ?? {}, 'unpackLimits', ['maxBytes', 'maxEntries'])
    for (const key of ['maxBytes', 'maxEntries'] as const) {
      const v = limits[key]
      if (v !== undefined && (typeof v !== 'number' || !Number.isSafeInteger(v) || v < 1)) {
        throw errors.badArgument({
          subject: `unpackLimits.${key}`,
          problem: `must be a positive integer, got ${describe(v)}`,
        })
      }
    }
    this.unpackLimits = {
      ...(limits.maxBytes !== undefined && { maxBytes: limits.maxBytes as number }),
      ...(limits.maxEntries !== undefined && { maxEntries: limits.maxEntries as number }),
    }
    this.refs = new RefStore(this.cacheDir)
    this.blobs = new BlobStore(`${this.cacheDir}/blobs`)
  }

  readonly insecureRegistries: string[]
  readonly pullPolicy: PullPolicy
  private readonly unpackLimits: { maxBytes?: number; maxEntries?: number }
  private readonly refs: RefStore
  private readonly blobs: BlobStore

  /**
   * Pulls an OCI image (`registry/repo:tag`, `…@sha256:…`, `python:3.12-slim`) into the cache:
   * verified blobs, one rootfs per ordered diff_ids. S102 when the pull fails (including no
   * manifest for this host's platform), S101 for a missing image under policy 'never'.
   */
  async pull(reference: string, options: PullImageOptions = {}): Promise<BuildResult> {
    const ref = parseReference(reference)
    optionsObject(options, 'pull options', ['policy', 'onProgress'])
    const policy = pullPolicyOption(options.policy, 'policy') ?? this.pullPolicy
    if (options.onProgress !== undefined && typeof options.onProgress !== 'function')
      throw errors.badArgument({
        subject: 'onProgress',
        problem: `must be a function, got ${describe(options.onProgress)}`,
      })
    await this.cache.own()
    return pullImage(this.cache, ref, {
      policy,
      onProgress: options.onProgress,
      insecure: this.insecureRegistries,
      ...this.unpackLimits,
    })
  }

  /**
   * Imports an image without a registry: a `docker save` tarball, an OCI image layout
   * directory or an `oci-archive` tarball (told apart by their content), under `name`.
   */
  /**
   * Imports an OCI image layout (directory or oci-archive) or a `docker save` tar. One holding
   * several images is given the one to take as `ref` (its ref name annotation, or a RepoTags entry
   * or tag) or as `<path>:<ref>`.
   */
  async import(
    source: string,
    options: { name: string; ref?: string; onProgress?: ProgressListener },
  ): Promise<BuildResult> {
    const o = optionsObject(options, 'import options', ['name', 'ref', 'onProgress'])
    const name = validateImageName(o.name)
    const ref = optionalString(o.ref, 'import ref')
    if (isPresetName(name))
      throw errors.imageNameClash({
        subject: `image name "${name}"`,
        problem: 'clashes with a preset; choose another name',
      })
    if (typeof source !== 'string' || source === '')
      throw errors.badArgument({ subject: 'import source', problem: `must be a path, got ${describe(source)}` })
    await this.cache.own()
    const from = ref === undefined ? await splitImportRef(source) : { path: source, ref }
    return importArchive(this.cache, this.blobs, from.path, name, options.onProgress, this.unpackLimits, from.ref)
  }

  /**
   * The image for a name, building presets (and recipe images whose build was removed) on
   * first use. A built preset is reused as long as its recipe is unchanged, without asking the
   * archive or the npm registry (no network at create); `build(name)` checks both and rebuilds
   * when either moved, `build(name, { force: true })` rebuilds regardless.
   */
  async resolve(
    name: string,
    options: Pick<BuildOptions, 'onProgress'> & { policy?: PullPolicy } = {},
  ): Promise<ResolvedImage> {
    const { policy, ...rest } = options ?? {}
    buildOptions(rest)
    const pin = typeof name === 'string' ? splitPin(name) : null
    if (pin?.version) return this.resolvePinned(pin.image, pin.version)
    if (typeof name === 'string' && looksLikeReference(name))
      return strip(await this.pull(name, { policy, onProgress: options.onProgress }))
    validateImageName(name)
    await this.cache.own()
    const known = this.resolved.get(name)
    if (known !== undefined && (await this.stampOf(name, known.image.id)) === known.stamp) return known.image
    // Each stamp is taken before its file is read: a change after that shows at the next resolve.
    const nameStamp = await this.cache.stamp(this.cache.layout.nameRecord(name))
    const record = await this.cache.readName(name)
    const manifestStamp = record === null ? null : await this.cache.stamp(this.cache.layout.manifest(record.id))
    const manifest = record === null ? null : await this.cache.readManifest(record.id)
    const found = (image: ResolvedImage) => {
      this.resolved.set(name, { image, stamp: `${nameStamp}|${manifestStamp}` })
      return image
    }
    if (isPresetName(name)) {
      if (
        record !== null &&
        manifest !== null &&
        manifest.recipeDigest === recipeDigest(presetRecipe(name, this.suite))
      ) {
        return found({ name, id: record.id, rootfs: this.cache.layout.rootfs(record.id), manifest })
      }
      if (policy === 'never') throw notBuilt(name)
      return strip(await this.build(name, { onProgress: options.onProgress }))
    }
    if (record === null)
      throw errors.imageUnknown({
        subject: `image "${name}"`,
        problem: `is unknown: not a preset (${Object.keys(PRESETS).join(', ')}) and not registered`,
      })
    if (manifest !== null) return found({ name, id: record.id, rootfs: this.cache.layout.rootfs(record.id), manifest })
    if (record.kind === 'recipe' && record.recipe !== undefined) {
      if (policy === 'never') throw notBuilt(name)
      return strip(await this.buildRecipe(name, record.recipe, options))
    }
    if (record.kind === 'oci' && record.source !== undefined && looksLikeReference(record.source))
      return strip(await this.registerReference(name, record.source, options))
    throw errors.imageUnknown({
      subject: `image "${name}" (${record.id})`,
      problem: 'is not built: its files were removed; register it again',
    })
  }

  /**
   * `name@id` (pin.ts): version `id` of the image `name` while the cache holds it, whatever the
   * name points to now; never built nor pulled. S101 when the cache does not hold it, or when it
   * is a version of another image (the allowlist and caps go by the name).
   */
  private async resolvePinned(name: string, id: string): Promise<ResolvedImage> {
    const ref = looksLikeReference(name) ? parseReference(name) : null
    const image = ref?.canonical ?? validateImageName(name)
    const subject = `image ${JSON.stringify(`${image}@${id}`)}`
    await this.cache.own()
    const manifest = await this.cache.readManifest(id)
    if (manifest === null)
      throw errors.imageUnknown({
        subject,
        problem: 'is not in the cache: that version was never built here, or was pruned',
      })
    const current = ref === null ? await this.cache.readName(image) : await this.refs.read(image)
    if (current?.id !== id && manifest.name !== image)
      throw errors.imageUnknown({
        subject,
        problem: `is not a version of ${image}: that image was built as ${manifest.name}`,
      })
    // The version a reference points to now answers with that reference's own config (pull.ts withOwnConfig).
    if (ref !== null && current?.id === id) {
      const pulled = strip(await this.pull(image, { policy: 'never' }))
      if (pulled.id === id) return pulled
    }
    return { name: image, id, rootfs: this.cache.layout.rootfs(id), manifest }
  }

  private async stampOf(name: string, id: string): Promise<string> {
    const [nameStamp, manifestStamp] = await Promise.all([
      this.cache.stamp(this.cache.layout.nameRecord(name)),
      this.cache.stamp(this.cache.layout.manifest(id)),
    ])
    return `${nameStamp}|${manifestStamp}`
  }

  /** Whether `name` was registered (images.register) in this cache; presets are not registered. */
  async isRegistered(name: string): Promise<boolean> {
    if (typeof name !== 'string' || !NAME_PATTERN.test(name) || isPresetName(name)) return false
    await this.cache.ownIfPresent()
    return (await this.cache.readName(name)) !== null
  }

  /**
   * Builds a preset (or rebuilds a registered image). For presets and recipes this asks the
   * archive for its InRelease files and the npm registry for the Node release (a few small
   * requests): a no-op when the image of that state exists, unless force.
   */
  async build(name: string, options: BuildOptions = {}): Promise<BuildResult> {
    validateImageName(name)
    buildOptions(options)
    await this.cache.own()
    if (isPresetName(name)) {
      const nameRecord = (id: string): NameRecord => ({ name, id, kind: 'preset', updatedAt: new Date().toISOString() })
      return this.buildFromArchive(name, 'preset', presetRecipe(name, this.suite), [], [], nameRecord, options)
    }
    const record = await this.cache.readName(name)
    if (record === null)
      throw errors.imageUnknown({
        subject: `image "${name}"`,
        problem: `is unknown: not a preset (${Object.keys(PRESETS).join(', ')}) and not registered`,
      })
    if (record.kind === 'recipe' && record.recipe !== undefined) return this.buildRecipe(name, record.recipe, options)
    if (record.kind === 'oci' && record.source !== undefined && looksLikeReference(record.source))
      return this.registerReference(name, record.source, { ...options, policy: options.force ? 'always' : undefined })
    if (
      record.kind === 'oci' &&
      record.source !== undefined &&
      (options.force || (await this.cache.readManifest(record.id)) === null)
    )
      return this.import(record.source, { name, onProgress: options.onProgress })
    if (!options.force) {
      const manifest = await this.cache.readManifest(record.id)
      if (manifest !== null)
        return { name, id: record.id, rootfs: this.cache.layout.rootfs(record.id), manifest, built: false }
    }
    if (record.source === undefined)
      throw errors.imageUnknown({
        subject: `image "${name}"`,
        problem: 'has no recorded source to rebuild from; register it again',
      })
    return this.registerPath(name, record.source, options)
  }

  /**
   * Registers a custom image under `name`: a directory, a tarball (.tar, .tar.gz, .tgz,
   * .tar.zst) or a recipe `{ base, packages, files }`. Directories and tarballs are copied into
   * the cache; recipes are built right away.
   */
  async register(name: string, source: ImageSource, options: BuildOptions = {}): Promise<BuildResult> {
    validateImageName(name)
    buildOptions(options)
    if (isPresetName(name))
      throw errors.imageNameClash({
        subject: `image name "${name}"`,
        problem: 'clashes with a preset; choose another name',
      })
    if (typeof source === 'string' && looksLikeReference(source)) return this.registerReference(name, source, options)
    if (typeof source === 'string') return this.registerPath(name, source, options)
    if (isRecipe(source)) return this.buildRecipe(name, source, options)
    if (typeof source === 'object' && source !== null && typeof (source as { path?: unknown }).path === 'string') {
      return this.registerPath(name, (source as { path: string }).path, options)
    }
    throw errors.badArgument({
      subject: 'image source',
      problem: `must be a path, { path } or a recipe { base, packages, files }, got ${JSON.stringify(source)}`,
    })
  }

  /** A name for an OCI reference: pulled (by the pull policy), then the name points at it. */
  private async registerReference(
    name: string,
    reference: string,
    options: BuildOptions & { policy?: PullPolicy },
  ): Promise<BuildResult> {
    const pulled = await this.pull(reference, { policy: options.policy, onProgress: options.onProgress })
    await this.cache.writeName({
      name,
      id: pulled.id,
      kind: 'oci',
      source: parseReference(reference).canonical,
      updatedAt: new Date().toISOString(),
    })
    return { ...pulled, name }
  }

  private async registerPath(name: string, sourcePath: string, options: BuildOptions): Promise<BuildResult> {
    if (typeof sourcePath !== 'string' || sourcePath === '')
      throw errors.badArgument({
        subject: 'image source path',
        problem: `must be a non-empty string, got ${JSON.stringify(sourcePath)}`,
      })
    const source = await inspectSource(sourcePath)
    await this.cache.own()
    const nameRecord = (id: string): NameRecord => ({
      name,
      id,
      kind: source.kind,
      source: source.path,
      updatedAt: new Date().toISOString(),
    })
    if (source.kind === 'tarball') {
      const sha256 = await fileSha256(source.path)
      return ensureImage(this.cache, {
        name,
        id: tarballImageId(sha256),
        force: options.force,
        onProgress: options.onProgress,
        nameRecord,
        produce: customProducer('tarball', source.path, sha256),
      })
    }
    return ensureImage(this.cache, {
      name,
      id: null,
      idFromTree: directoryImageId,
      force: options.force,
      onProgress: options.onProgress,
      nameRecord,
      produce: customProducer('directory', source.path),
    })
  }

  private async buildRecipe(name: string, recipe: ImageRecipe, options: BuildOptions): Promise<BuildResult> {
    const valid = validateRecipe(recipe)
    const buildRecipe = await customRecipe(valid, this.suite)
    await this.cache.own()
    const nameRecord = (id: string): NameRecord => ({
      name,
      id,
      kind: 'recipe',
      recipe: valid,
      updatedAt: new Date().toISOString(),
    })
    const layer = await this.presetLayer(valid, options)
    return this.buildFromArchive(name, 'recipe', buildRecipe, valid.files ?? [], valid.debs ?? [], nameRecord, {
      ...options,
      layer,
    })
  }

  /**
   * A recipe on a Debian preset is built as a layer over the preset's tree (layer-build.ts), the
   * preset built first: as root only (a rootless build cannot lay an overlay over the preset's
   * files and unpack packages of other owners), else undefined (everything with mmdebstrap).
   */
  private async presetLayer(recipe: ImageRecipe, options: BuildOptions): Promise<RecipeLayer | undefined> {
    if (this.buildMode !== 'root' || PRESETS[recipe.base as PresetName].system !== 'debian') return undefined
    const preset = await this.build(recipe.base, { onProgress: options.onProgress })
    return { lower: preset.rootfs, packages: [...new Set(recipe.packages ?? [])].sort(), presetId: preset.id }
  }

  /**
   * A preset or recipe image of the archive's state now: its id is the recipe with the digests
   * of the InRelease files and the npm packages pinned. When no known URI serves the suite (a
   * host whose apt sources name no Debian archive, first build), mmdebstrap uses its default
   * and the id comes from what the build fetched; the build records that archive for next time.
   */
  private async buildFromArchive(
    name: string,
    kind: 'preset' | 'recipe',
    recipe: BuildRecipe,
    files: RecipeFile[],
    debs: string[],
    nameRecord: (id: string) => NameRecord,
    options: BuildOptions & { layer?: RecipeLayer },
  ): Promise<BuildResult> {
    const record = await this.cache.readName(name)
    const previous = record === null ? null : await this.cache.readManifest(record.id)
    const entries = await readAptSources(this.aptSources)
    const recorded = previous?.archive?.sources ?? []
    const [archive, npm] = await Promise.all([currentArchiveState(this.suite, entries, recorded), npmPins(recipe)])
    // An archive known to serve the suite (the host's sources name it, or the last build used it)
    // that does not answer (offline): say so now rather than after a failed mmdebstrap.
    const known = recorded.length > 0 || entries.some((e) => e.suites.includes(this.suite))
    const tried = candidateUris(this.suite, entries, recorded)
    if (archive === null && previous !== null && known && !options.force) {
      throw errors.imageBuildFailed(
        {
          subject: `checking whether image "${name}" is current`,
          problem: `failed: no archive served ${this.suite}'s InRelease (tried ${tried.join(', ')}); the built image stays in use, --force rebuilds with mmdebstrap's default archive`,
        },
        { retryable: true },
      )
    }
    // A layer's image is as much the preset it was laid over as its recipe.
    const over = options.layer?.presetId
    const idOf = (releases: ReadonlyArray<{ sha256: string }>) =>
      imageId(recipe, { ...sourceState(releases, npm), ...(over !== undefined && { over }) })
    return ensureImage(this.cache, {
      name,
      id: archive === null ? null : idOf(archive.releases),
      idFromTree: (_tree, produced) => idOf(produced.archive?.fetched ?? []),
      force: options.force,
      onProgress: options.onProgress,
      nameRecord,
      produce: debianProducer({ kind, recipe, files, debs, archive, npm, mode: this.buildMode, layer: options.layer }),
    })
  }

  /** Built images by name. */
  async list(): Promise<ImageListEntry[]> {
    await this.cache.ownIfPresent()
    const entries: ImageListEntry[] = []
    for (const record of await this.cache.listNames()) {
      const manifest = await this.cache.readManifest(record.id)
      if (manifest === null) continue
      entries.push({
        name: record.name,
        id: record.id,
        sizeBytes: manifest.sizeBytes,
        builtAt: manifest.builtAt,
        preset: isPresetName(record.name),
      })
    }
    for (const ref of await this.refs.list()) {
      const manifest = await this.cache.readManifest(ref.id)
      if (manifest !== null)
        entries.push({
          name: ref.ref,
          id: ref.id,
          sizeBytes: manifest.sizeBytes,
          builtAt: manifest.builtAt,
          preset: false,
        })
    }
    return entries
  }

  /**
   * Forgets a name and deletes its image unless another name or a live sandbox uses it (prune
   * deletes it once none does). Returns false when there was nothing to remove (a preset never built).
   */
  async remove(name: string): Promise<boolean> {
    if (typeof name === 'string' && looksLikeReference(name)) {
      const ref = parseReference(name)
      await this.cache.ownIfPresent()
      const record = await this.refs.read(ref.canonical)
      if (record === null) throw errors.imageUnknown({ subject: `image ${ref.canonical}`, problem: 'is not pulled' })
      await this.refs.remove(ref.canonical)
      await this.removeUnlessReferenced(record.id, new Set())
      return true
    }
    validateImageName(name)
    await this.cache.ownIfPresent()
    const record = await this.cache.readName(name)
    if (record === null) {
      if (isPresetName(name)) return false
      throw errors.imageUnknown({ subject: `image "${name}"`, problem: 'is unknown: not a preset and not registered' })
    }
    await this.cache.removeName(name)
    const stillUsed = (await this.cache.listNames()).some((r) => r.id === record.id)
    if (!stillUsed) await this.removeUnlessReferenced(record.id, new Set())
    return true
  }

  /**
   * Deletes images no name points to (older builds of a preset, replaced registrations), no live
   * sandbox runs on (of any process on this cache, users.ts) and not listed in `keep`, plus
   * leftovers of dead builds. Returns the removed ids.
   */
  async prune(options: PruneOptions = {}): Promise<string[]> {
    optionsObject(options, 'prune options', ['keep'])
    // A string is iterable too: its characters would be taken for ids.
    if (
      options.keep !== undefined &&
      (typeof options.keep === 'string' || typeof (options.keep as Iterable<string>)?.[Symbol.iterator] !== 'function')
    ) {
      throw errors.badArgument({
        subject: 'prune keep',
        problem: `must be a list of image ids, got ${describe(options.keep)}`,
      })
    }
    const keep = new Set(options.keep ?? [])
    for (const id of keep)
      if (typeof id !== 'string')
        throw errors.badArgument({
          subject: 'prune keep',
          problem: `must hold image ids (strings), got ${describe(id)}`,
        })
    await this.cache.own()
    await this.cache.sweep()
    const removed: string[] = []
    for (const id of await this.cache.listImageIds()) {
      if (keep.has(id)) continue
      if (await this.removeUnlessReferenced(id, keep)) removed.push(id)
    }
    await sweepUsers(this.cache.layout)
    await this.pruneBlobs()
    return removed
  }

  /** Under the image's lock, so an image being published or booted is never taken for garbage. */
  private async removeUnlessReferenced(id: string, keep: Set<string>): Promise<boolean> {
    const lock = await acquireLock(this.cache.layout.lock(id))
    try {
      if (keep.has(id)) return false
      if ((await this.cache.listNames()).some((r) => r.id === id)) return false
      if ((await this.refs.list()).some((r) => r.id === id)) return false
      return await removeUnlessUsed(this.cache.layout, id, () => this.cache.removeImage(id))
    } finally {
      await lock.release()
    }
  }

  /**
   * Blobs no image uses any more, and references whose image is gone. A pull in flight holds
   * the lock of the image it builds, whose layers no manifest lists yet: while any build
   * runs, unused blobs are kept.
   */
  private async pruneBlobs(): Promise<void> {
    const used = new Set<string>()
    for (const id of await this.cache.listImageIds()) {
      const oci = (await this.cache.readManifest(id))?.oci
      if (oci === undefined) continue
      used.add(oci.configDigest)
      for (const layer of oci.layers) used.add(layer.digest)
    }
    for (const ref of await this.refs.list()) {
      if ((await this.cache.readManifest(ref.id)) === null) await this.refs.remove(ref.ref)
      // A reference's own config, when it shares its rootfs with an image of another config.
      else if (ref.configDigest !== undefined) used.add(ref.configDigest)
    }
    if (await this.anyBuildRunning()) return
    for (const digest of await this.blobs.list()) if (!used.has(digest)) await this.blobs.remove(digest)
  }

  private async anyBuildRunning(): Promise<boolean> {
    for (const entry of await fs.readdir(this.cache.layout.locksDir).catch(() => [] as string[])) {
      const owner = await readLockOwner(path.join(this.cache.layout.locksDir, entry))
      if (owner !== null && isProcessAlive(owner)) return true
    }
    return false
  }

  /**
   * Recomputes the tree digest of a built image and compares it with its manifest: false
   * means something wrote into the image (images must be mounted read-only).
   */
  async verify(name: string): Promise<boolean> {
    const pulled = typeof name === 'string' && looksLikeReference(name)
    if (!pulled) validateImageName(name)
    await this.cache.ownIfPresent()
    const record = pulled ? await this.refs.read(parseReference(name).canonical) : await this.cache.readName(name)
    const manifest = record === null ? null : await this.cache.readManifest(record.id)
    if (record === null || manifest === null)
      throw errors.imageUnknown({ subject: `image "${name}"`, problem: pulled ? 'is not pulled' : 'is not built' })
    const rootfs = this.cache.layout.rootfs(record.id)
    // A rootless unpack kept the image's owners in the user's subordinate ids: a 0700 directory
    // of image uid 1000 is read where it was written, in the same mapped namespace.
    const mapping = manifest.kind === 'oci' ? await unpackMapping() : null
    const tree = mapping === null ? await summarizeTree(rootfs) : await summarizeTreeOffLoop(rootfs, mapping)
    return tree.digest === manifest.treeDigest
  }
}

/** The npm registry packages a recipe carries, newest of their majors now. */
async function npmPins(recipe: BuildRecipe): Promise<NpmPin[]> {
  if (recipe.node === null) return []
  const registry = await npmRegistry()
  return Promise.all([
    resolveNpmPackage(registry, nodePackageName(), recipe.node.major),
    resolveNpmPackage(registry, 'npm', recipe.node.npmMajor),
  ])
}

/** S101 for an image that is not built where the policy says never to build it (autoInstall: false). */
function notBuilt(name: string): SandboxError {
  return errors.imageUnknown({
    subject: `image "${name}"`,
    problem: `is not built and the policy is never (autoInstall: false): build it first (krunbox images build ${name})`,
  })
}

function strip(result: BuildResult): ResolvedImage {
  const { built: _built, ...resolved } = result
  return resolved
}

export { control as imageStoreControl }

/** `<path>:<ref>` when `source` is no path but its part before a colon is (a ref may hold colons: `repo:tag`). */
async function splitImportRef(source: string): Promise<{ path: string; ref: string | null }> {
  if (await pathExists(source)) return { path: source, ref: null }
  for (let colon = source.indexOf(':'); colon > 0; colon = source.indexOf(':', colon + 1))
    if (await pathExists(source.slice(0, colon))) return { path: source.slice(0, colon), ref: source.slice(colon + 1) }
  return { path: source, ref: null }
}

function pathExists(p: string): Promise<boolean> {
  return fs.stat(p).then(
    () => true,
    () => false,
  )
}
