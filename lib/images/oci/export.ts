/**
 * A sandbox's files as an OCI image: the layers of the image it booted (base-layers.ts), one
 * layer of what it wrote (a snapshot's root/ with its deletions as whiteouts, layer-writer.ts),
 * a config over the base's (export-config.ts), then an OCI layout, a docker archive or a push.
 * A stored snapshot's layer is kept beside the store once made (`.exports/`), so exporting it
 * again (to another target, or pushing what was written as a layout) does not tar it again.
 *
 * Failures are coded: a target that exists or is refused (S213, S215, S211), a registry that
 * refuses or does not answer in time and a tree that cannot be a layer (S102, retryable when a
 * retry may pass), the host's own disk (S313). Whatever failed, nothing of the image is left.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs/promises'
import path from 'node:path'
import { isSandboxError, type SandboxError } from '../../errors.js'
import { hostWriteError } from '../../host-write-error.js'
import { errors } from '../../protocol/errors.gen.js'
import { isProcessAlive } from '../liveness.js'
import type { ResolvedImage } from '../types.js'
import { baseLayers, type BlobFile } from './base-layers.js'
import { writeDockerArchive } from './docker-archive.js'
import { imageConfig, imageManifest } from './export-config.js'
import type { ExportPlan, ExportResult } from './export-options.js'
import { LayerTreeError, writeLayer, type LayerBlob } from './layer-writer.js'
import { writeLayout, type ImageParts } from './layout-writer.js'
import { pushImage } from './push.js'
import { RegistryError } from './registry.js'
import { sandboxIds, type SandboxIds } from './sandbox-ids.js'

export interface ExportSource {
  /** What the export is of, for messages: "snapshot <id>", "sandbox <id>". */
  what: string
  /** The image the layer was made over, as the cache holds it. */
  image: ResolvedImage
  /** The image cache's blob store. */
  blobsRoot: string
  /** A snapshot's directory: root/ and markers.json. */
  layerDir: string
  /** Where the layer's blob is kept between exports, under `key`; null: it is made in `layerDir` for this export only. */
  layerCache: { dir: string; key: string } | null
  insecureRegistries: readonly string[]
  env?: NodeJS.ProcessEnv
}

/** Part of every kept layer's key: a change to how layers are written makes new ones. */
const LAYER_FORMAT = 1

export async function exportImage(source: ExportSource, plan: ExportPlan): Promise<ExportResult> {
  const { target } = plan
  const where = target.kind === 'registry' ? target.ref.canonical : target.path
  const subject = `exporting ${source.what} to ${where}`
  try {
    const ids = await sandboxIds()
    const base = await baseLayers(source.image, source.blobsRoot, ids)
    const writes = await writesLayer(source, ids)
    const layers = [...base.layers, writes]
    const { blob: config, platform } = imageConfig({
      base: base.config,
      treeEnv: source.image.manifest.env,
      set: plan.config,
      diffIds: layers.map((l) => l.diffId),
      added: [
        ...(base.config === null ? [`krunbox: image ${source.image.name} (${source.image.id})`] : []),
        `krunbox: what ${source.what} wrote`,
      ],
    })
    const parts: ImageParts = { layers, config, manifest: imageManifest(config, layers), platform }
    if (target.kind === 'layout') await writeLayout(target.path, target.refName, parts)
    else if (target.kind === 'archive') await writeDockerArchive(target.path, target.repoTag, parts)
    else
      await pushImage({
        ref: target.ref,
        parts,
        insecure: source.insecureRegistries,
        timeoutMs: target.timeoutMs,
        env: source.env,
      })
    return {
      manifestDigest: parts.manifest.digest,
      configDigest: config.digest,
      layers: layers.map(({ digest, size, diffId, mediaType }) => ({ digest, size, diffId, mediaType })),
      target: where,
    }
  } catch (err) {
    throw exportError(err, subject)
  }
}

function exportError(err: unknown, subject: string): SandboxError {
  if (isSandboxError(err)) return err
  if (err instanceof RegistryError)
    return errors.imageBuildFailed(
      { subject, problem: `failed: ${err.message}` },
      { cause: err, retryable: err.retryable },
    )
  if (err instanceof LayerTreeError)
    return errors.imageBuildFailed({ subject, problem: `failed: ${err.message}` }, { cause: err, retryable: false })
  return (
    hostWriteError(err, subject) ??
    errors.imageBuildFailed({ subject, problem: `failed: ${(err as Error).message}` }, { cause: err, retryable: false })
  )
}

/** The layer of what the sandbox wrote: kept from an earlier export of the same snapshot, else made. */
async function writesLayer(source: ExportSource, ids: SandboxIds): Promise<BlobFile> {
  const markers = JSON.parse(await fs.readFile(path.join(source.layerDir, 'markers.json'), 'utf8')) as {
    whiteouts: string[]
    opaque: string[]
  }
  const tree = { root: path.join(source.layerDir, 'root'), whiteouts: markers.whiteouts, opaque: markers.opaque }
  const cache = source.layerCache
  if (cache === null) {
    const file = path.join(source.layerDir, `layer-${randomBytes(6).toString('hex')}.tar.gz`)
    return { ...(await writeLayer(tree, file, ids)), file }
  }
  const key = `${cache.key}.v${LAYER_FORMAT}`
  const record = path.join(cache.dir, `${key}.json`)
  const blobFile = (layer: LayerBlob) => path.join(cache.dir, `${key}-${layer.digest.slice('sha256:'.length)}.tar.gz`)
  const known = await fs
    .readFile(record, 'utf8')
    .then((text) => JSON.parse(text) as LayerBlob)
    .catch(() => null)
  if (known !== null) {
    const st = await fs.stat(blobFile(known)).catch(() => null)
    if (st !== null && st.size === known.size) return { ...known, file: blobFile(known) }
  }
  await fs.mkdir(cache.dir, { recursive: true, mode: 0o700 })
  await sweep(cache.dir)
  const tmp = path.join(cache.dir, `.tmp-${process.pid}-${randomBytes(6).toString('hex')}`)
  try {
    const layer = await writeLayer(tree, tmp, ids)
    await fs.rename(tmp, blobFile(layer))
    // The same temporary name stages the record, renamed into place whole.
    await fs.writeFile(tmp, JSON.stringify(layer), { mode: 0o600 })
    await fs.rename(tmp, record)
    return { ...layer, file: blobFile(layer) }
  } finally {
    await fs.rm(tmp, { force: true })
  }
}

/** What exports of processes that died left half made. */
async function sweep(dir: string): Promise<void> {
  for (const name of await fs.readdir(dir).catch(() => [] as string[])) {
    const m = /^\.tmp-(\d+)-/.exec(name)
    if (m !== null && !isProcessAlive({ pid: Number(m[1]), start: null }))
      await fs.rm(path.join(dir, name), { force: true })
  }
}
