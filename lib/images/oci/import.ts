/**
 * Images without a registry: a `docker save` tarball (manifest.json), an OCI image layout
 * directory (oci-layout, index.json, blobs/) or an `oci-archive` tarball (the same layout in a
 * tar), told apart by their content. Every blob is hashed on the way into the blob store and
 * every layer checked against its diff_id while unpacking, as for a pull.
 *
 * The source is a regular file or a directory, else it is refused at once (S105), before
 * anything is opened. A symbolic link as the source is followed; files inside a layout
 * directory are read only when they are regular files themselves, never through a link. Every
 * file is opened so that it cannot block (archive-file.ts) and read through that descriptor.
 */
import { createHash, randomBytes } from 'node:crypto'
import fs, { type FileHandle } from 'node:fs/promises'
import path from 'node:path'
import tarStream from 'tar-stream'
import { SandboxError, isSandboxError } from '../../errors.js'
import { describe } from '../../options.js'
import type { ImageCache } from '../cache.js'
import { ensureImage } from '../ensure.js'
import { ProgressReporter } from '../progress.js'
import type { BuildResult, OciImageRecord, ProgressListener } from '../types.js'
import { fileKind, openRegular } from './archive-file.js'
import type { BlobStore } from './blobs.js'
import { parseImageConfig } from './config.js'
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
import { ociImageId, sniffCompression, unpackInto, type UnpackLimits } from './unpack.js'
import type { UnpackError } from './extract.js'
import { errors } from '../../protocol/errors.gen.js'

const MAX_ARCHIVE_BYTES = 64 * 1024 ** 3
const MAX_ARCHIVE_ENTRIES = 100_000
const MAX_JSON_BYTES = 8 * 1024 * 1024

/** Where the archive's files are: name → a file on disk and its sha256. */
type FileTable = Map<string, { file: string; digest: string; size: number }>

function importFailed(source: string, problem: string, cause?: unknown): SandboxError {
  return errors.imageSourceUnreadable(
    { subject: `image archive ${source}`, problem },
    cause === undefined ? {} : { cause },
  )
}

function notArchive(source: string, kind: string): SandboxError {
  return errors.imageSourceNotRootfs({
    subject: `image archive ${source}`,
    problem: `is ${kind}, not a regular file or a directory (a docker save or oci-archive tarball, or an OCI image layout directory)`,
  })
}

/** One of the archive's files, opened when it is a regular file; `what` names it when it is not. */
async function openArchiveFile(file: string, what: string): Promise<{ handle: FileHandle; size: number }> {
  const opened = await openRegular(file, false)
  if ('kind' in opened) throw new Error(`${what} is ${opened.kind}, not a regular file`)
  return opened
}

function cleanName(name: string): string {
  return name
    .split('/')
    .filter((c) => c !== '' && c !== '.')
    .join('/')
}

/** The sha256 of a layout directory's file, or null when it is no regular file (then it counts as absent). */
async function sha256File(file: string): Promise<{ digest: string; size: number } | null> {
  const opened = await openRegular(file, false).catch(() => null)
  if (opened === null || 'kind' in opened) return null
  const hash = createHash('sha256')
  let size = 0
  for await (const chunk of opened.handle.createReadStream()) {
    hash.update(chunk as Buffer)
    size += (chunk as Buffer).length
  }
  return { digest: `sha256:${hash.digest('hex')}`, size }
}

/** Unpacks a tarball's regular files into `dir` (flat, numbered), hashing each; the handle is closed at the end. */
async function readTarball(source: FileHandle, dir: string): Promise<FileTable> {
  const table: FileTable = new Map()
  const extract = tarStream.extract()
  const input = source.createReadStream()
  input.on('error', (err) => extract.destroy(err))
  input.pipe(extract)
  let total = 0
  let count = 0
  try {
    for await (const entry of extract) {
      if (++count > MAX_ARCHIVE_ENTRIES) throw new Error(`it has more than ${MAX_ARCHIVE_ENTRIES} entries`)
      if (entry.header.type !== 'file' && entry.header.type !== 'contiguous-file') {
        entry.resume()
        continue
      }
      const file = path.join(dir, String(table.size))
      const handle = await fs.open(file, 'wx', 0o600)
      const hash = createHash('sha256')
      let size = 0
      try {
        for await (const chunk of entry) {
          size += (chunk as Buffer).length
          total += (chunk as Buffer).length
          if (total > MAX_ARCHIVE_BYTES) throw new Error(`it holds more than ${MAX_ARCHIVE_BYTES} bytes`)
          hash.update(chunk as Buffer)
          await handle.write(chunk as Buffer)
        }
      } finally {
        await handle.close()
      }
      table.set(cleanName(entry.header.name), { file, digest: `sha256:${hash.digest('hex')}`, size })
    }
  } finally {
    // Stopped early (a bound, a bad tar): the source's descriptor closes with its stream.
    input.destroy()
  }
  return table
}

/** An OCI layout directory's files, without copying them. Only blobs/sha256/* and the two JSON files count. */
async function readLayoutDir(dir: string): Promise<FileTable> {
  const table: FileTable = new Map()
  for (const name of ['oci-layout', 'index.json']) {
    const file = path.join(dir, name)
    const hashed = await sha256File(file)
    if (hashed !== null) table.set(name, { file, ...hashed })
  }
  const blobsDir = path.join(dir, 'blobs', 'sha256')
  for (const hex of await fs.readdir(blobsDir).catch(() => [] as string[])) {
    if (!/^[0-9a-f]{64}$/.test(hex)) continue
    const file = path.join(blobsDir, hex)
    const st = await fs.lstat(file)
    // Hashed when ingested: a blob whose bytes do not match its name is refused there.
    if (st.isFile()) table.set(`blobs/sha256/${hex}`, { file, digest: `sha256:${hex}`, size: st.size })
  }
  return table
}

async function readJson(table: FileTable, name: string): Promise<{ body: Buffer; digest: string }> {
  const entry = table.get(name)
  if (entry === undefined) throw new Error(`${name} is missing`)
  const { handle, size } = await openArchiveFile(entry.file, name)
  try {
    if (size > MAX_JSON_BYTES) throw new Error(`${name} is larger than ${MAX_JSON_BYTES} bytes`)
    const body = await handle.readFile()
    return { body, digest: `sha256:${createHash('sha256').update(body).digest('hex')}` }
  } finally {
    await handle.close()
  }
}

/** Copies a file into the blob store under `digest`, refusing it if it does not hash to that. */
async function ingestFile(blobs: BlobStore, digest: string, file: string): Promise<void> {
  if (await blobs.has(digest)) return
  const { handle, size } = await openArchiveFile(file, `blob ${digest}`)
  const stream = handle.createReadStream()
  try {
    await blobs.ingest(digest, size, size, stream as AsyncIterable<Buffer>)
  } finally {
    stream.destroy()
  }
}

interface Located {
  manifestDigest: string
  configDigest: string
  layers: Array<{ digest: string; size: number }>
  platform: string
}

/** Image names an archive holds, for a message: the first 16, each capped (the archive's words). */
function listNames(names: string[]): string {
  return names.length === 0 ? 'none' : names.slice(0, 16).map(describe).join(', ')
}

/**
 * The entries of a layout's index.json that make the image named `ref` (its ref name
 * annotation), or all of them when they name one image at most; an index naming several images
 * needs a ref, and the message lists the names there are.
 */
function imageEntries(manifests: Descriptor[], ref: string | null): Descriptor[] {
  const names = [...new Set(manifests.flatMap((m) => (m.refName === undefined ? [] : [m.refName])))]
  if (ref !== null) {
    const chosen = manifests.filter((m) => m.refName === ref)
    if (chosen.length === 0)
      throw new Error(`it has no image named ${describe(ref)}; the names there are: ${listNames(names)}`)
    return chosen
  }
  if (names.length > 1)
    throw new Error(
      `it holds ${names.length} images (${listNames(names)}): name one, as import(\`<path>:<name>\`) or { ref: <name> }`,
    )
  return manifests
}

/** OCI layout: index.json → the named image → this host's manifest → its config and layers, all from blobs/. */
async function locateOci(table: FileTable, blobs: BlobStore, ref: string | null): Promise<Located> {
  const blob = (digest: string) => {
    const entry = table.get(`blobs/sha256/${digest.slice('sha256:'.length)}`)
    if (entry === undefined) throw new Error(`blob ${digest} is missing from blobs/`)
    return entry
  }
  let doc = parseManifest((await readJson(table, 'index.json')).body, null)
  if (doc.kind === 'index') doc = { kind: 'index', manifests: imageEntries(doc.manifests, ref) }
  else if (ref !== null) throw new Error(`its index.json names no images, so none is ${describe(ref)}`)
  let manifestDigest = ''
  let platform = platformName(hostPlatform())
  for (let depth = 0; doc.kind === 'index'; depth += 1) {
    if (depth > 2) throw new Error('its indexes nest too deep')
    const chosen =
      doc.manifests.length === 1 && doc.manifests[0].platform === undefined
        ? doc.manifests[0]
        : selectPlatform(doc.manifests)
    if (chosen === null)
      throw new Error(
        `it has no manifest for this host's platform ${platformName(hostPlatform())}; it has ${listPlatforms(doc.manifests)}`,
      )
    if (chosen.platform) platform = platformName(chosen.platform)
    const entry = blob(chosen.digest)
    await ingestFile(blobs, chosen.digest, entry.file)
    doc = parseManifest(await blobs.read(chosen.digest, MAX_JSON_BYTES), chosen.mediaType || null)
    manifestDigest = chosen.digest
  }
  for (const d of [doc.config, ...doc.layers]) await ingestFile(blobs, d.digest, blob(d.digest).file)
  return {
    manifestDigest,
    configDigest: doc.config.digest,
    layers: doc.layers.map((l) => ({ digest: l.digest, size: l.size })),
    platform,
  }
}

/** The entry of a docker save's manifest.json that `ref` names (`repository:tag`, or a tag alone), or its only one. */
function dockerEntry(
  list: Array<{ Config?: unknown; Layers?: unknown; RepoTags?: unknown }>,
  ref: string | null,
): { Config?: unknown; Layers?: unknown } {
  const tags = (e: { RepoTags?: unknown }) =>
    Array.isArray(e.RepoTags) ? e.RepoTags.filter((t): t is string => typeof t === 'string') : []
  if (ref === null && list.length === 1) return list[0]
  const listed = listNames(list.flatMap(tags))
  if (ref === null)
    throw new Error(
      `manifest.json lists ${list.length} images (${listed}): name one, as import(\`<path>:<tag>\`) or { ref: <tag> }`,
    )
  const exact = list.find((e) => tags(e).includes(ref))
  if (exact !== undefined) return exact
  const byTag = list.filter((e) => tags(e).some((t) => t.slice(t.lastIndexOf(':') + 1) === ref))
  if (byTag.length === 0) throw new Error(`manifest.json lists no image named ${describe(ref)}; it has ${listed}`)
  if (byTag.length > 1) throw new Error(`the tag ${describe(ref)} names ${byTag.length} of its images (${listed})`)
  return byTag[0]
}

/** docker save: manifest.json names the config and the layer files; blobs are keyed by their hash. */
async function locateDocker(table: FileTable, blobs: BlobStore, ref: string | null): Promise<Located> {
  const { body, digest } = await readJson(table, 'manifest.json')
  const list = JSON.parse(body.toString('utf8')) as Array<{ Config?: unknown; Layers?: unknown; RepoTags?: unknown }>
  if (!Array.isArray(list) || list.length === 0) throw new Error('manifest.json lists no image')
  const entry = dockerEntry(list, ref)
  if (
    typeof entry.Config !== 'string' ||
    !Array.isArray(entry.Layers) ||
    entry.Layers.some((l) => typeof l !== 'string')
  )
    throw new Error('manifest.json has no Config and Layers')
  const file = (name: string) => {
    const found = table.get(cleanName(name))
    if (found === undefined) throw new Error(`${describe(name)} named by manifest.json is missing`)
    return found
  }
  const config = file(entry.Config)
  await ingestFile(blobs, config.digest, config.file)
  const layers: Array<{ digest: string; size: number }> = []
  for (const name of entry.Layers as string[]) {
    const layer = file(name)
    await ingestFile(blobs, layer.digest, layer.file)
    layers.push({ digest: layer.digest, size: layer.size })
  }
  return { manifestDigest: digest, configDigest: config.digest, layers, platform: platformName(hostPlatform()) }
}

/** The tarball, opened without blocking; what was opened must be a regular file (not one swapped in since the stat). */
async function openTarball(abs: string): Promise<FileHandle> {
  const opened = await openRegular(abs, true)
  if ('kind' in opened) throw notArchive(abs, opened.kind)
  return opened.handle
}

export async function importArchive(
  cache: ImageCache,
  blobs: BlobStore,
  source: string,
  name: string,
  onProgress?: ProgressListener,
  limits: UnpackLimits = {},
  ref: string | null = null,
): Promise<BuildResult> {
  const abs = path.resolve(source)
  // What it came from, as import() takes it again (a rebuild after a prune): the path and the image's name there.
  const named = ref === null ? abs : `${abs}:${ref}`
  const st = await fs.stat(abs).catch((err: NodeJS.ErrnoException) => err)
  if (st instanceof Error) {
    if (st.code === 'ENOENT' || st.code === 'ENOTDIR')
      throw errors.imageSourceMissing({ source: `image archive ${abs}` })
    throw importFailed(abs, `is unreadable: ${st.code}`, st)
  }
  // Refused before anything is opened: opening a device may already do something (a tape rewinds).
  if (!st.isFile() && !st.isDirectory()) throw notArchive(abs, fileKind(st))
  const progress = new ProgressReporter(onProgress)
  progress.report('resolve', 0)
  await fs.mkdir(blobs.root, { recursive: true })
  const scratch = path.join(blobs.root, `.ingest-${process.pid}-import-${randomBytes(6).toString('hex')}`)
  await fs.mkdir(scratch, { mode: 0o700 })
  try {
    let table: FileTable
    try {
      table = st.isDirectory() ? await readLayoutDir(abs) : await readTarball(await openTarball(abs), scratch)
    } catch (err) {
      if (isSandboxError(err)) throw err
      throw importFailed(abs, `is not a readable image archive: ${(err as Error).message}`, err)
    }
    const isOci = table.has('index.json') && table.has('oci-layout')
    if (!isOci && !table.has('manifest.json')) {
      throw errors.imageSourceNotRootfs({
        subject: `image archive ${abs}`,
        problem:
          'is neither a docker save tarball (manifest.json), an OCI image layout (oci-layout, index.json) nor an oci-archive',
      })
    }
    let located: Located
    try {
      located = isOci ? await locateOci(table, blobs, ref) : await locateDocker(table, blobs, ref)
    } catch (err) {
      if (isSandboxError(err)) throw err
      throw importFailed(abs, `cannot be imported: ${(err as Error).message}`, err)
    }
    const image = parseImageConfig(await blobs.read(located.configDigest, MAX_JSON_BYTES))
    if (!configMatchesHost(image))
      throw importFailed(
        abs,
        `holds an image for ${configPlatformName(image)}, not for this host's platform ${platformName(hostPlatform())}`,
      )
    if (image.diffIds.length !== located.layers.length)
      throw importFailed(abs, `lists ${image.diffIds.length} diff_ids for ${located.layers.length} layers`)
    for (const layer of located.layers) await sniffCompression(blobs.path(layer.digest))
    const record: Omit<OciImageRecord, 'dropped' | 'userSpec'> = {
      source: named,
      manifestDigest: located.manifestDigest,
      configDigest: located.configDigest,
      platform: located.platform,
      layers: located.layers.map((l, i) => ({ ...l, diffId: image.diffIds[i] })),
      config: image.config,
    }
    return await ensureImage(cache, {
      name,
      id: ociImageId(image.diffIds),
      onProgress,
      nameRecord: (id) => ({ name, id, kind: 'oci', source: named, updatedAt: new Date().toISOString() }),
      produce: (rootfs, _tmp, buildProgress) =>
        unpackInto(rootfs, blobs, record, buildProgress, limits).catch((err: UnpackError) => {
          // S102 as a pull's unpack: retryable only when the host's resources failed, not the archive.
          throw errors.imageBuildFailed(
            { subject: `importing ${abs} as "${name}"`, problem: `failed: ${err.message}` },
            { cause: err, retryable: err.transient },
          )
        }),
    })
  } finally {
    await fs.rm(scratch, { recursive: true, force: true })
  }
}
