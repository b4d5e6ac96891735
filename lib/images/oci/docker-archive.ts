/**
 * An exported image as a `docker save`-compatible tar, laid out as Docker 25 and later write
 * theirs: an OCI image layout (`oci-layout`, `index.json`, `blobs/sha256/…`) with Docker's
 * `manifest.json` beside it naming the config and the layers by their paths. `docker load`,
 * `skopeo copy docker-archive:` and `oci-archive:`, and `images.import` all read it. Written to a
 * fresh temporary file beside the target and linked into place once whole (export-target.ts).
 */
import fs from 'node:fs'
import fsp from 'node:fs/promises'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { openTarget, targetError } from './export-target.js'
import { OCI_LAYOUT, layoutIndex, type ImageParts } from './layout-writer.js'
import { REF_NAME_ANNOTATION } from './manifest.js'
import { TAR_END, encodeHeader, padding, type TarHeader } from './tar-header.js'

const CHUNK = 1024 * 1024

export async function writeDockerArchive(target: string, repoTag: string | null, parts: ImageParts): Promise<void> {
  const { dir, name } = openTarget(target)
  let temp: { name: string; fd: number }
  try {
    temp = dir.createTemp(name, 0o644)
  } catch (err) {
    dir.close()
    throw targetError(err, target)
  }
  try {
    await pipeline(Readable.from(archive(repoTag, parts)), fs.createWriteStream('', { fd: temp.fd, autoClose: true }))
    try {
      // link(2) never replaces: a file or link put at the target meanwhile stays, and this fails.
      dir.link(temp.name, name)
    } catch (err) {
      throw targetError(err, target)
    }
  } finally {
    dir.unlink(temp.name)
    dir.close()
  }
}

async function* archive(repoTag: string | null, parts: ImageParts): AsyncGenerator<Buffer> {
  const path = (digest: string) => `blobs/sha256/${digest.slice('sha256:'.length)}`
  const annotations: Record<string, string> =
    repoTag === null
      ? {}
      : { [REF_NAME_ANNOTATION]: repoTag.slice(repoTag.lastIndexOf(':') + 1), 'io.containerd.image.name': repoTag }
  const dockerManifest = Buffer.from(
    JSON.stringify([
      {
        Config: path(parts.config.digest),
        RepoTags: repoTag === null ? [] : [repoTag],
        Layers: parts.layers.map((l) => path(l.digest)),
      },
    ]),
  )
  const mtime = Math.floor(Date.now() / 1000)
  const header = (name: string, kind: TarHeader['kind'], size = 0): Buffer =>
    encodeHeader({ name, kind, mode: kind === 'directory' ? 0o755 : 0o644, uid: 0, gid: 0, size, mtime })
  const small = (name: string, body: Buffer) => [header(name, 'file', body.length), body, padding(body.length)]
  yield Buffer.concat([
    header('blobs', 'directory'),
    header('blobs/sha256', 'directory'),
    ...small('oci-layout', OCI_LAYOUT),
    ...small('index.json', layoutIndex(parts, annotations)),
    ...small('manifest.json', dockerManifest),
    ...small(path(parts.config.digest), parts.config.body),
    ...small(path(parts.manifest.digest), parts.manifest.body),
  ])
  for (const layer of parts.layers) {
    yield header(path(layer.digest), 'file', layer.size)
    yield* fileChunks(layer.file, layer.size)
    yield padding(layer.size)
  }
  yield TAR_END
}

/** Exactly `size` bytes of a blob file. */
async function* fileChunks(file: string, size: number): AsyncGenerator<Buffer> {
  const handle = await fsp.open(file, 'r')
  try {
    let at = 0
    while (at < size) {
      const want = Math.min(CHUNK, size - at)
      const buffer = Buffer.allocUnsafe(want)
      const { bytesRead } = await handle.read(buffer, 0, want, at)
      if (bytesRead === 0) throw new Error(`${file} holds ${at} bytes, not ${size}`)
      at += bytesRead
      yield bytesRead === want ? buffer : buffer.subarray(0, bytesRead)
    }
  } finally {
    await handle.close()
  }
}
