/**
 * From verified blobs in the store to a root filesystem in a build directory: the layers are
 * applied in order by the extractor (off the event loop), each checked against its diff_id,
 * then the mount points a sandbox needs are added. Used by pulls and by imports.
 */
import fs from 'node:fs/promises'
import { describe } from '../../options.js'
import path from 'node:path'
import { addMissingMountPoints } from '../custom.js'
import type { ProducedImage } from '../ensure.js'
import type { ProgressReporter } from '../progress.js'
import type { OciImageRecord } from '../types.js'
import type { BlobStore } from './blobs.js'
import {
  DEFAULT_EXPANSION,
  DEFAULT_MAX_ENTRIES,
  DEFAULT_MAX_UNPACKED_BYTES,
  LayerSourceError,
  asUnpackError,
  extractLayers,
  type ExtractLayer,
} from './extract.js'
import { sha256Hex } from '../recipe.js'
import { numericUser } from './user.js'
import { SANDBOX_ID_BASE, SANDBOX_ID_COUNT } from '../../drivers/idmap.js'
import { resolveInRoot } from '../rootfs.js'
import { mappedIdCount, unpackMapping } from './userns.js'

const MOUNT_POINTS = ['/proc', '/sys', '/dev', '/tmp', '/workspace']

/** One published rootfs per ordered list of diff_ids: retagged, re-compressed, Docker and OCI copies share it. */
export function ociImageId(diffIds: string[]): string {
  return sha256Hex(`krunbox-image:oci:${diffIds.join('\n')}`)
}

const GZIP = Buffer.from([0x1f, 0x8b])
const ZSTD = Buffer.from([0x28, 0xb5, 0x2f, 0xfd])

/** A layer's compression from its first bytes: media types lie (docker save writes plain tars under any name). */
export async function sniffCompression(file: string): Promise<ExtractLayer['compression']> {
  const handle = await fs.open(file, 'r')
  try {
    const head = Buffer.alloc(4)
    const { bytesRead } = await handle.read(head, 0, 4, 0)
    if (bytesRead >= 2 && head.subarray(0, 2).equals(GZIP)) return 'gzip'
    if (bytesRead >= 4 && head.equals(ZSTD)) return 'zstd'
    return 'none'
  } finally {
    await handle.close()
  }
}

export interface UnpackLimits {
  /** Bytes the layers may unpack to (their uncompressed tar streams); default 32 GiB, and never more than FREE_SHARE of the free space. */
  maxBytes?: number
  maxEntries?: number
  /** The bomb check (DEFAULT_EXPANSION); tests make it bite early. */
  expansion?: { ratio: number; afterBytes: number }
}

/**
 * An unpack takes at most half the space free on the image cache's filesystem when it starts:
 * an image never fills the host's disk, nor do two unpacks at once, and the sandboxes' own
 * writable layers keep room. Zero runs are holes, so this bounds what a bomb could write too.
 */
export const FREE_SHARE = 0.5

/** The bound on what the layers unpack to: the caller's, or half the free space when that is lower. */
async function unpackBound(dir: string, limits: UnpackLimits): Promise<{ maxBytes: number; freeBytes: number | null }> {
  const limit = limits.maxBytes ?? DEFAULT_MAX_UNPACKED_BYTES
  const st = await fs.statfs(dir)
  const free = st.bavail * st.bsize
  const share = Math.floor(free * FREE_SHARE)
  return share < limit ? { maxBytes: share, freeBytes: free } : { maxBytes: limit, freeBytes: null }
}

type Progress = Pick<ProgressReporter, 'report' | 'reportLayer'>

/**
 * Unpacks the record's layers into `rootfs`; what fails is an UnpackError saying whether a
 * retry may help. `ready(i)` settles when layer i is in the blob store (a pull downloads the
 * next layer while this one unpacks); its rejection is passed through as it is.
 */
export function unpackInto(
  rootfs: string,
  blobs: BlobStore,
  record: Omit<OciImageRecord, 'dropped' | 'userSpec'>,
  progress: Progress,
  limits: UnpackLimits = {},
  ready: (index: number) => Promise<void> = () => Promise.resolve(),
): Promise<ProducedImage> {
  return unpack(rootfs, blobs, record, progress, limits, ready).catch((err: unknown) => {
    throw err instanceof LayerSourceError ? err.reason : asUnpackError(err)
  })
}

async function unpack(
  rootfs: string,
  blobs: BlobStore,
  record: Omit<OciImageRecord, 'dropped' | 'userSpec'>,
  progress: Progress,
  limits: UnpackLimits,
  ready: (index: number) => Promise<void>,
): Promise<ProducedImage> {
  await fs.mkdir(rootfs, { mode: 0o755 })
  // What rejects here reaches the caller as it is (extract.ts wraps it in a LayerSourceError).
  const nextLayer = async (index: number): Promise<ExtractLayer> => {
    await ready(index)
    const layer = record.layers[index]
    const file = blobs.path(layer.digest)
    return { file, diffId: layer.diffId, compression: await sniffCompression(file) }
  }
  const count = record.layers.length
  progress.report('extract', 0)
  const asRoot = process.getuid?.() === 0
  // Without root, owners are kept only through the user's subordinate ids: the unpack runs in
  // a user namespace mapped as the user's sandboxes are, so image uid n is sandbox uid n.
  const mapping = asRoot ? null : await unpackMapping()
  const idShift = asRoot
    ? { base: SANDBOX_ID_BASE, count: SANDBOX_ID_COUNT }
    : mapping === null
      ? null
      : { base: 0, count: Math.min(mappedIdCount(mapping.uidMap), mappedIdCount(mapping.gidMap)) }
  // After the layers: mount points, and (as root) the root and mount points in the sandbox's id range; then the tree is summarized.
  const finish = async () => {
    await fs.chmod(rootfs, 0o755)
    await addMissingMountPoints(rootfs)
    // Entries are already in the sandbox's id range: the root and the mount points added here join them.
    if (asRoot) {
      for (const inner of ['/', ...MOUNT_POINTS]) {
        const abs = await resolveInRoot(rootfs, inner)
        const st = await fs.lstat(abs).catch(() => null)
        if (st !== null && (st.uid < SANDBOX_ID_BASE || st.uid >= SANDBOX_ID_BASE + SANDBOX_ID_COUNT))
          await fs.lchown(abs, SANDBOX_ID_BASE, SANDBOX_ID_BASE)
      }
    }
  }
  const result = await extractLayers(
    {
      rootfs,
      count,
      asRoot: asRoot || mapping !== null,
      idShift,
      ...(await unpackBound(path.dirname(rootfs), limits)),
      maxEntries: limits.maxEntries ?? DEFAULT_MAX_ENTRIES,
      expansion: limits.expansion ?? DEFAULT_EXPANSION,
    },
    nextLayer,
    (index) => {
      const layer = record.layers[index]
      progress.reportLayer('extract', (index + 1) / count, {
        digest: layer.digest,
        index,
        count,
        bytes: layer.size,
        totalBytes: layer.size,
      })
    },
    finish,
    mapping,
  )
  const user = record.config.user === null ? null : await numericUser(rootfs, record.config.user)
  if (record.config.user !== null && user === null) {
    throw new Error(
      `its config's User ${describe(record.config.user)} is not in the image's /etc/passwd (or its group not in /etc/group)`,
    )
  }
  return {
    kind: 'oci',
    recipe: null,
    recipeDigest: null,
    source: { path: record.source },
    archive: null,
    packages: [],
    buildMode: null,
    oci: {
      ...record,
      userSpec: user,
      dropped: { devices: result.droppedDevices, other: result.droppedOther, xattrs: result.droppedXattrs },
    },
    tree: result.tree,
  }
}
