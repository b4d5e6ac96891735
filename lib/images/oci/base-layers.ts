/**
 * The layers an export puts under the sandbox's own: those of the image it booted. An OCI
 * image (pulled or imported) gives its own layer blobs from the blob store, as they are, and its
 * original config (whose Env, WorkingDir, User, Cmd, Entrypoint and Labels are the export's
 * defaults). A preset's or custom image's tree becomes one layer, made once and kept in the blob
 * store under a record keyed by the tree's id, digest and build time, so a second export of the
 * same image does not tar it again (a forced rebuild, with the same id, gets a new record).
 */
import { createHash, randomBytes } from 'node:crypto'
import fs from 'node:fs/promises'
import path from 'node:path'
import { errors } from '../../protocol/errors.gen.js'
import type { ResolvedImage } from '../types.js'
import { BlobStore } from './blobs.js'
import { writeLayer, type LayerBlob } from './layer-writer.js'
import type { SandboxIds } from './sandbox-ids.js'
import { sniffCompression } from './unpack.js'

/** A blob an export writes or pushes, read from `file`. */
export interface BlobFile extends LayerBlob {
  file: string
}

export interface BaseLayers {
  layers: BlobFile[]
  /** The base image's config document, or null when it is not an OCI image. */
  config: Record<string, unknown> | null
}

const MAX_CONFIG_BYTES = 8 * 1024 * 1024
/** Part of every tree layer's record key: a change to how trees become layers makes new ones. */
const TREE_LAYER_FORMAT = 1
const MEDIA_OF = {
  gzip: 'application/vnd.oci.image.layer.v1.tar+gzip',
  zstd: 'application/vnd.oci.image.layer.v1.tar+zstd',
  none: 'application/vnd.oci.image.layer.v1.tar',
} as const

export async function baseLayers(image: ResolvedImage, blobsRoot: string, ids: SandboxIds): Promise<BaseLayers> {
  const blobs = new BlobStore(blobsRoot)
  const oci = image.manifest.oci
  if (image.manifest.kind === 'oci' && oci !== undefined) {
    const layers: BlobFile[] = []
    for (const layer of oci.layers) {
      if (!(await blobs.has(layer.digest, layer.size))) throw missingBlob(image, `layer ${layer.digest}`)
      const file = blobs.path(layer.digest)
      layers.push({ ...layer, file, mediaType: MEDIA_OF[await sniffCompression(file)] })
    }
    if (!(await blobs.has(oci.configDigest))) throw missingBlob(image, `config ${oci.configDigest}`)
    const config = JSON.parse((await blobs.read(oci.configDigest, MAX_CONFIG_BYTES)).toString('utf8')) as Record<
      string,
      unknown
    >
    return { layers, config }
  }
  return { layers: [await treeLayer(image, blobs, ids)], config: null }
}

function missingBlob(image: ResolvedImage, what: string) {
  return errors.imageUnknown({
    subject: `image ${image.name} (${image.id})`,
    problem: `has lost its ${what} from the cache's blob store; pull or import it again`,
  })
}

/** The tree of a preset or custom image as one layer, from the blob store when an earlier export made it. */
async function treeLayer(image: ResolvedImage, blobs: BlobStore, ids: SandboxIds): Promise<BlobFile> {
  const key = createHash('sha256')
    .update(`${TREE_LAYER_FORMAT}\n${image.id}\n${image.manifest.treeDigest}\n${image.manifest.builtAt}`)
    .digest('hex')
  const recordFile = path.join(blobs.root, 'tree-layers', `${key}.json`)
  const known = await fs
    .readFile(recordFile, 'utf8')
    .then((text) => JSON.parse(text) as LayerBlob)
    .catch(() => null)
  if (known !== null && (await blobs.has(known.digest, known.size))) return { ...known, file: blobs.path(known.digest) }
  await fs.mkdir(path.join(blobs.root, 'sha256'), { recursive: true })
  await fs.mkdir(path.dirname(recordFile), { recursive: true })
  // .ingest-<pid>-…: the blob store's sweep removes what a process that died left.
  const tmp = path.join(blobs.root, `.ingest-${process.pid}-tree-${randomBytes(6).toString('hex')}`)
  try {
    const layer = await writeLayer({ root: image.rootfs }, tmp, ids)
    await fs.rename(tmp, blobs.path(layer.digest))
    // The same temporary name stages the record, renamed into place whole.
    await fs.writeFile(tmp, JSON.stringify(layer), { mode: 0o644 })
    await fs.rename(tmp, recordFile)
    return { ...layer, file: blobs.path(layer.digest) }
  } finally {
    await fs.rm(tmp, { force: true })
  }
}
