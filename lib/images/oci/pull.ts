/**
 * Pulling an image by reference: manifest (and index → this host's platform), config, the
 * layers missing from the blob store, each verified against its digest as it streams in, then
 * one published rootfs per ordered diff_ids (ensure.ts: lock, build, rename). Pull policies:
 * if-missing (default: a pulled reference is used without asking the registry), always (one
 * manifest request; nothing else when it did not change), never (S101 unless pulled).
 */
import { createHash } from 'node:crypto'
import { SandboxError, isSandboxError } from '../../errors.js'
import { describe } from '../../options.js'
import type { ImageCache } from '../cache.js'
import { ensureImage } from '../ensure.js'
import { isProcessAlive } from '../liveness.js'
import { ProgressReporter } from '../progress.js'
import type { BuildResult, OciImageRecord, ProgressListener } from '../types.js'
import { BlobStore, DigestMismatch } from './blobs.js'
import {
  configMatchesHost,
  configPlatformName,
  hostPlatform,
  listPlatforms,
  parseManifest,
  platformName,
  selectPlatform,
  type Descriptor,
} from './manifest.js'
import { parseImageConfig } from './config.js'
import { numericUser } from './user.js'
import type { ImageReference } from './reference.js'
import { RefStore, type RefRecord } from './refs.js'
import { RegistryClient, RegistryError, type RegistryOptions } from './registry.js'
import { UnpackError } from './extract.js'
import { ociImageId, unpackInto, type UnpackLimits } from './unpack.js'
import { errors } from '../../protocol/errors.gen.js'

export type PullPolicy = 'if-missing' | 'always' | 'never'
export const PULL_POLICIES: readonly PullPolicy[] = ['if-missing', 'always', 'never']

export interface PullOptions extends RegistryOptions, UnpackLimits {
  policy?: PullPolicy
  onProgress?: ProgressListener
  /** Largest layer blob accepted; default 16 GiB. */
  maxLayerBytes?: number
}

const MAX_CONFIG_BYTES = 8 * 1024 * 1024
const DEFAULT_MAX_LAYER_BYTES = 16 * 1024 ** 3

function sha256Of(data: Buffer): string {
  return `sha256:${createHash('sha256').update(data).digest('hex')}`
}

/**
 * S102 for a failed pull, retryable only when its cause may pass: the network, 429 and 5xx
 * answers, a stalled body, the local disk. Credentials refused, a manifest or blob the registry
 * does not have, no manifest for this platform, content that does not match its digest or does
 * not parse fail the same way next time.
 */
function pullFailed(ref: ImageReference, problem: string, cause: unknown, retryable: boolean): SandboxError {
  return errors.imageBuildFailed(
    { subject: `pulling ${ref.canonical}`, problem: `failed: ${problem}` },
    { ...(cause !== undefined && { cause }), retryable },
  )
}

/** Content that is wrong as served: the same bytes come back on a retry. */
class BadContent extends Error {}

function causeIsTransient(err: unknown): boolean {
  if (err instanceof RegistryError) return err.retryable
  if (err instanceof UnpackError) return err.transient
  return !(err instanceof DigestMismatch || err instanceof BadContent)
}

function asPullError(ref: ImageReference, err: unknown): SandboxError {
  if (isSandboxError(err)) return err
  return pullFailed(ref, (err as Error).message, err, causeIsTransient(err))
}

/** Runs a parse of registry content; what it throws is BadContent. */
function parsed<T>(parse: () => T): T {
  try {
    return parse()
  } catch (err) {
    throw new BadContent((err as Error).message)
  }
}

/** Pulls running in this process by cache, reference and policy: concurrent callers share one. */
const inflight = new Map<string, Promise<BuildResult>>()

export function pullImage(cache: ImageCache, ref: ImageReference, options: PullOptions = {}): Promise<BuildResult> {
  const key = `${cache.root}\0${ref.canonical}\0${options.policy ?? 'if-missing'}`
  const running = inflight.get(key)
  if (running !== undefined) {
    // Each caller still hears the end of the pull it waits for.
    return running.then((r) => (new ProgressReporter(options.onProgress).done(), r))
  }
  const work = pull(cache, ref, options).catch((err: unknown) => {
    throw asPullError(ref, err)
  })
  inflight.set(key, work)
  work.finally(() => inflight.get(key) === work && inflight.delete(key)).catch(() => undefined)
  return work
}

async function present(
  cache: ImageCache,
  blobs: BlobStore,
  known: RefRecord,
  ref: ImageReference,
): Promise<BuildResult | null> {
  const manifest = await cache.readManifest(known.id)
  if (manifest === null) return null
  const result: BuildResult = {
    name: ref.canonical,
    id: known.id,
    rootfs: cache.layout.rootfs(known.id),
    manifest,
    built: false,
  }
  const shared = manifest.oci
  if (shared === undefined || known.configDigest === undefined || shared.configDigest === known.configDigest)
    return result
  // Pulled with a config of its own over a shared rootfs: that config is in the blob store.
  if (!(await blobs.has(known.configDigest))) return null
  const bytes = await blobs.read(known.configDigest, MAX_CONFIG_BYTES)
  const { config } = parsed(() => parseImageConfig(bytes))
  const { dropped: _dropped, userSpec: _userSpec, ...common } = shared
  return withOwnConfig(result, {
    ...common,
    source: ref.canonical,
    manifestDigest: known.manifestDigest,
    configDigest: known.configDigest,
    config,
  })
}

/**
 * The published rootfs is keyed by diff_ids alone, so its record holds the config of whichever
 * image first published it. An image that shares every layer (a Dockerfile that changed only
 * CMD or ENV) answers with its own config, digest and default user instead.
 */
async function withOwnConfig(
  result: BuildResult,
  own: Omit<OciImageRecord, 'dropped' | 'userSpec'>,
): Promise<BuildResult> {
  const shared = result.manifest.oci
  if (shared === undefined || shared.configDigest === own.configDigest) return result
  const userSpec = own.config.user === null ? null : await numericUser(result.rootfs, own.config.user)
  if (own.config.user !== null && userSpec === null) {
    throw new BadContent(
      `its config's User ${describe(own.config.user)} is not in the image's /etc/passwd (or its group not in /etc/group)`,
    )
  }
  return { ...result, manifest: { ...result.manifest, oci: { ...own, userSpec, dropped: shared.dropped } } }
}

async function pull(cache: ImageCache, ref: ImageReference, options: PullOptions): Promise<BuildResult> {
  const policy = options.policy ?? 'if-missing'
  const refs = new RefStore(cache.root)
  const blobs = new BlobStore(cache.layout.root + '/blobs')
  const known = await refs.read(ref.canonical)
  if (known !== null && policy !== 'always') {
    const found = await present(cache, blobs, known, ref)
    if (found !== null) {
      new ProgressReporter(options.onProgress).done()
      return found
    }
  }
  if (policy === 'never')
    throw errors.imageUnknown({
      subject: `image ${ref.canonical}`,
      problem: 'is not pulled and the pull policy is never (pull it first: krunbox images pull)',
    })
  const progress = new ProgressReporter(options.onProgress)
  progress.report('resolve', 0)
  const client = new RegistryClient(ref, options)
  // Never pulled into this cache: blobs will download (a re-pull may find nothing changed).
  if (known === null) client.warmDownloads()
  try {
    const top = await client.manifest(ref.digest ?? (ref.tag as string))
    const topDigest = sha256Of(top.body)
    if (ref.digest !== null && topDigest !== ref.digest)
      throw pullFailed(ref, `the registry served a manifest whose digest is ${topDigest}`, undefined, false)
    if (known !== null && known.manifestDigest === topDigest) {
      const found = await present(cache, blobs, known, ref)
      if (found !== null) {
        progress.done()
        return found
      }
    }
    let manifest = parsed(() => parseManifest(top.body, top.contentType))
    let manifestDigest = topDigest
    let platform = platformName(hostPlatform())
    if (manifest.kind === 'index') {
      const chosen = selectPlatform(manifest.manifests)
      if (chosen === null) {
        throw pullFailed(
          ref,
          `it has no manifest for this host's platform ${platformName(hostPlatform())}; it has ${listPlatforms(manifest.manifests)}`,
          undefined,
          false,
        )
      }
      platform = platformName(chosen.platform)
      const inner = await client.manifest(chosen.digest)
      if (sha256Of(inner.body) !== chosen.digest)
        throw pullFailed(
          ref,
          `the registry served a manifest for ${chosen.digest} that does not match it`,
          undefined,
          false,
        )
      manifest = parsed(() => parseManifest(inner.body, inner.contentType))
      manifestDigest = chosen.digest
      if (manifest.kind !== 'manifest') throw pullFailed(ref, 'its index points at another index', undefined, false)
    }
    const { config: configDesc, layers } = manifest
    progress.report('resolve', 0.5)
    if (!(await blobs.has(configDesc.digest)))
      await client.blobToStore(
        configDesc.digest,
        blobs.storeInput(configDesc.digest, configDesc.size, MAX_CONFIG_BYTES),
      )
    const configBytes = await blobs.read(configDesc.digest, MAX_CONFIG_BYTES)
    const image = parsed(() => parseImageConfig(configBytes))
    if (!configMatchesHost(image)) {
      throw pullFailed(
        ref,
        `it is built for ${configPlatformName(image)}, not for this host's platform ${platformName(hostPlatform())}`,
        undefined,
        false,
      )
    }
    if (image.diffIds.length !== layers.length)
      throw pullFailed(
        ref,
        `its config lists ${image.diffIds.length} diff_ids for ${layers.length} layers`,
        undefined,
        false,
      )
    const id = ociImageId(image.diffIds)
    const record: Omit<OciImageRecord, 'dropped' | 'userSpec'> = {
      source: ref.canonical,
      manifestDigest,
      configDigest: configDesc.digest,
      platform,
      layers: layers.map((l, i) => ({ digest: l.digest, size: l.size, diffId: image.diffIds[i] })),
      config: image.config,
    }
    progress.report('resolve', 1)
    const result = await ensureImage(cache, {
      name: ref.canonical,
      id,
      onProgress: options.onProgress,
      nameRecord: () => null,
      onPublished: (published) =>
        refs.write({
          ref: ref.canonical,
          manifestDigest: topDigest,
          configDigest: configDesc.digest,
          id: published,
          pulledAt: new Date().toISOString(),
        }),
      produce: async (rootfs, _tmp, buildProgress) => {
        await blobs.sweep((pid) => isProcessAlive({ pid, start: null }))
        const stop = new AbortController()
        const downloads = downloadInOrder(
          client,
          blobs,
          layers,
          options.maxLayerBytes ?? DEFAULT_MAX_LAYER_BYTES,
          buildProgress,
          stop.signal,
        )
        try {
          return await unpackInto(rootfs, blobs, record, downloads.extractProgress, options, downloads.ready)
        } catch (err) {
          // Classified here: ensureImage passes a SandboxError through but would wrap anything else with S102's default advice.
          throw asPullError(ref, err)
        } finally {
          stop.abort()
          await downloads.done
        }
      },
    })
    return await withOwnConfig(result, record)
  } catch (err) {
    throw asPullError(ref, err)
  } finally {
    client.close()
  }
}

type Progress = Pick<ProgressReporter, 'report' | 'reportLayer'>

interface LayerDownloads {
  /** Settles when layer i is in the blob store, verified. */
  ready: (index: number) => Promise<void>
  /** The extractor's progress, held back while layers download: stages only move forward, and download bytes per layer keep coming. */
  extractProgress: Progress
  /** Settles when every layer is stored or the downloads stopped. */
  done: Promise<void>
}

/**
 * The layers not yet in the store, one after another from the first, so the extractor unpacks
 * layer N while N+1 downloads. Bytes per layer go to onProgress. An abort stops the download
 * in progress at its next chunk (the unpack failed: nothing more is needed).
 */
function downloadInOrder(
  client: RegistryClient,
  blobs: BlobStore,
  layers: Descriptor[],
  maxLayerBytes: number,
  progress: ProgressReporter,
  signal: AbortSignal,
): LayerDownloads {
  const settle = layers.map(() => {
    let resolve!: () => void
    let reject!: (err: unknown) => void
    const promise = new Promise<void>((res, rej) => ((resolve = res), (reject = rej)))
    // The unpack may have failed before it asks for this layer: no unhandled rejection then.
    promise.catch(() => undefined)
    return { promise, resolve, reject }
  })
  const held: Array<() => void> = []
  let downloading = true
  const hold = (emit: () => void) => (downloading ? held.push(emit) : emit())
  const extractProgress: Progress = {
    report: (...args) => hold(() => progress.report(...args)),
    reportLayer: (...args) => hold(() => progress.reportLayer(...args)),
  }
  const run = async () => {
    const missing = new Map<string, number>()
    for (const layer of layers) if (!(await blobs.has(layer.digest, layer.size))) missing.set(layer.digest, layer.size)
    const total = [...missing.values()].reduce((sum, size) => sum + size, 0)
    let before = 0
    progress.report('download', 0)
    for (const [index, layer] of layers.entries()) {
      if (signal.aborted) throw new Error('the downloads were stopped: the unpack failed')
      if (!(await blobs.has(layer.digest, layer.size))) {
        if (layer.size > maxLayerBytes)
          throw new BadContent(`layer ${layer.digest} is ${layer.size} bytes (at most ${maxLayerBytes})`)
        // The worker reports about every 1 % of a layer and at its end: enough for a bar, not an event per packet.
        const report = (bytes: number) =>
          progress.reportLayer('download', total === 0 ? 1 : (before + bytes) / total, {
            digest: layer.digest,
            index,
            count: layers.length,
            bytes,
            totalBytes: layer.size,
          })
        await client.blobToStore(
          layer.digest,
          blobs.storeInput(layer.digest, layer.size, maxLayerBytes),
          report,
          signal,
        )
        before += layer.size
      }
      settle[index].resolve()
    }
    progress.report('download', 1)
  }
  const done = run()
    .then(
      () => undefined,
      (err: unknown) => {
        for (const s of settle) s.reject(err)
      },
    )
    .finally(() => {
      downloading = false
      for (const emit of held.splice(0)) emit()
    })
  return { ready: (index) => settle[index].promise, extractProgress, done }
}
