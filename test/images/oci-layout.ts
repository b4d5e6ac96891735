/**
 * Test fixture: an OCI image layout directory (oci-layout, index.json, blobs/sha256/) written
 * from layers built in memory (oci-registry.ts), for images.import() without a registry; and
 * zstd layers, whose ratio gzip cannot reach.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { imageConfig, sha256, type ImageConfigInput, type Layer } from './oci-registry.js'

const MANIFEST = 'application/vnd.oci.image.manifest.v1+json'

/** Writes an OCI layout of one image to `dir`; `config` replaces the config built from the layers. */
export function writeLayout(dir: string, layers: Layer[], c: ImageConfigInput = {}, config?: Buffer): string {
  return writeLayoutOf(dir, [{ layers, c, config }])
}

export interface LayoutImage {
  layers: Layer[]
  c?: ImageConfigInput
  /** Replaces the config built from the layers. */
  config?: Buffer
  /** Its `org.opencontainers.image.ref.name` annotation in index.json. */
  refName?: string
}

/** Writes an OCI layout of these images to `dir`, each named in index.json by its refName if it has one. */
export function writeLayoutOf(dir: string, images: LayoutImage[]): string {
  const blobs = path.join(dir, 'blobs', 'sha256')
  fs.mkdirSync(blobs, { recursive: true })
  const manifests = images.map(({ layers, c = {}, config, refName }) => {
    const configBlob = config ?? imageConfig(layers, c)
    const manifest = Buffer.from(
      JSON.stringify({
        schemaVersion: 2,
        mediaType: MANIFEST,
        config: {
          mediaType: 'application/vnd.oci.image.config.v1+json',
          digest: sha256(configBlob),
          size: configBlob.length,
        },
        layers: layers.map((l) => ({ mediaType: l.mediaType, digest: sha256(l.blob), size: l.blob.length })),
      }),
    )
    for (const blob of [configBlob, manifest, ...layers.map((l) => l.blob)])
      fs.writeFileSync(path.join(blobs, sha256(blob).slice('sha256:'.length)), blob)
    return {
      mediaType: MANIFEST,
      digest: sha256(manifest),
      size: manifest.length,
      ...(refName !== undefined && { annotations: { 'org.opencontainers.image.ref.name': refName } }),
    }
  })
  fs.writeFileSync(path.join(dir, 'oci-layout'), '{"imageLayoutVersion":"1.0.0"}')
  fs.writeFileSync(path.join(dir, 'index.json'), JSON.stringify({ schemaVersion: 2, manifests }))
  return dir
}

/** zstd of `data` (level 3). */
export function zstd(data: Buffer): Buffer {
  const out = spawnSync('zstd', ['-q', '-c', '-3'], { input: data, maxBuffer: 1024 ** 3 })
  if (out.status !== 0) throw new Error(`zstd failed: ${out.stderr}`)
  return out.stdout
}

export function zstdLayer(raw: Buffer): Layer {
  return { blob: zstd(raw), diffId: sha256(raw), mediaType: 'application/vnd.oci.image.layer.v1.tar+zstd' }
}

/** A ustar header of a regular file of `size` bytes (tarLayer builds whole layers in memory; a bomb cannot be). */
function fileHeader(name: string, size: number): Buffer {
  const h = Buffer.alloc(512)
  const octal = (value: number, offset: number, width: number) =>
    h.write(`${value.toString(8).padStart(width - 1, '0')}\0`, offset, 'ascii')
  h.write(name, 0, 'utf8')
  octal(0o644, 100, 8)
  octal(0, 108, 8)
  octal(0, 116, 8)
  octal(size, 124, 12)
  octal(0, 136, 12)
  h.write('0', 156, 'ascii')
  h.write('ustar\0', 257, 'ascii')
  h.write('00', 263, 'ascii')
  h.fill(' ', 148, 156)
  octal(
    h.reduce((sum, b) => sum + b, 0),
    148,
    7,
  )
  return h
}

/**
 * A zstd layer of one file of `size` zeros (a multiple of 64 MiB), built from one compressed
 * 64 MiB frame repeated (zstd reads concatenated frames as one stream): a few KB that unpack to
 * gigabytes, made in a fraction of a second. Its diff_id is not the content's: an unpack that
 * gets to the end of it failed to stop the bomb.
 */
export function zeroBombLayer(size: number): Layer {
  const piece = 64 * 1024 ** 2
  const zeros = zstd(Buffer.alloc(piece))
  const frames = [zstd(fileHeader('zeros', size)), ...Array.from({ length: size / piece }, () => zeros)]
  frames.push(zstd(Buffer.alloc(1024)))
  return {
    blob: Buffer.concat(frames),
    diffId: sha256('not the content'),
    mediaType: 'application/vnd.oci.image.layer.v1.tar+zstd',
  }
}
