/**
 * An exported image as an OCI image layout directory (image-spec's image-layout: `oci-layout`,
 * `index.json` naming the manifest by its ref name, `blobs/sha256/<hex>`), staged beside the
 * target and renamed into place once whole (export-target.ts). A staging directory left by an
 * export that was killed is removed by the next export to the same target.
 */
import { randomBytes } from 'node:crypto'
import fs from 'node:fs'
import fsp from 'node:fs/promises'
import { HostDir } from '../../host-dir.js'
import { isProcessAlive, selfIdentity } from '../liveness.js'
import { describe } from '../../options.js'
import { errors } from '../../protocol/errors.gen.js'
import type { BlobFile } from './base-layers.js'
import type { JsonBlob } from './export-config.js'
import { exists, openTarget, targetError } from './export-target.js'
import { MEDIA, REF_NAME_ANNOTATION, type Platform } from './manifest.js'

/** Everything an image is made of, ready to be written or pushed. */
export interface ImageParts {
  layers: BlobFile[]
  config: JsonBlob
  manifest: JsonBlob
  platform: Platform
}

export const OCI_LAYOUT = Buffer.from(JSON.stringify({ imageLayoutVersion: '1.0.0' }))

/** index.json: the one manifest, with its platform and the annotations given. */
export function layoutIndex(parts: ImageParts, annotations: Record<string, string>): Buffer {
  return Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: MEDIA.ociIndex,
      manifests: [
        {
          mediaType: MEDIA.ociManifest,
          digest: parts.manifest.digest,
          size: parts.manifest.size,
          platform: parts.platform,
          annotations,
        },
      ],
    }),
  )
}

/** `.<name>.<pid>-<start>-<hex>.export`: the staging directory of an export to <name>, and who made it. */
function stagingName(name: string): string {
  const self = selfIdentity()
  return `.${name}.${self.pid}-${self.start ?? 'x'}-${randomBytes(8).toString('hex')}.export`
}

/**
 * Removes what exports to the same target left staged when their process was killed: only
 * directories of this uid whose name says an export to `name` made them, by a process now gone.
 */
async function sweepDeadStaging(dir: HostDir, name: string): Promise<void> {
  const prefix = `.${name}.`
  for (const entry of await fsp.readdir(`/proc/self/fd/${dir.fd}`).catch(() => [] as string[])) {
    if (!entry.startsWith(prefix) || !entry.endsWith('.export')) continue
    const owner = /^(\d+)-(\d+|x)-[0-9a-f]{16}$/.exec(entry.slice(prefix.length, -'.export'.length))
    if (owner === null) continue
    if (isProcessAlive({ pid: Number(owner[1]), start: owner[2] === 'x' ? null : owner[2] })) continue
    const st = fs.lstatSync(dir.at(entry), { throwIfNoEntry: false })
    if (st?.isDirectory() && st.uid === process.getuid?.())
      await fsp.rm(dir.at(entry), { recursive: true, force: true }).catch(() => {})
  }
}

/** The staging directory just made; one swapped for a link or a file before it was opened is S213. */
function openStaging(dir: HostDir, staging: string, target: string): HostDir {
  try {
    return HostDir.open(dir.at(staging))
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code !== 'ELOOP' && code !== 'ENOTDIR' && code !== 'ENOENT') throw err
    throw errors.fsExists({
      path: `export target ${describe(target)}`,
      reason: 'was tampered with: its staging directory was replaced before the export could open it',
    })
  }
}

export async function writeLayout(target: string, refName: string, parts: ImageParts): Promise<void> {
  const { dir, name } = openTarget(target)
  const staging = stagingName(name)
  const held: HostDir[] = []
  try {
    await sweepDeadStaging(dir, name)
    try {
      fs.mkdirSync(dir.at(staging), { mode: 0o700 })
    } catch (err) {
      throw targetError(err, target)
    }
    const root = openStaging(dir, staging, target)
    held.push(root)
    const sub = (parent: HostDir, child: string) => {
      fs.mkdirSync(parent.at(child), { mode: 0o755 })
      const d = HostDir.open(parent.at(child))
      held.push(d)
      return d
    }
    const sha256 = sub(sub(root, 'blobs'), 'sha256')
    const hex = (digest: string) => digest.slice('sha256:'.length)
    for (const layer of parts.layers) {
      await fsp.copyFile(layer.file, sha256.at(hex(layer.digest)), fs.constants.COPYFILE_EXCL)
      const st = await fsp.stat(sha256.at(hex(layer.digest)))
      if (st.size !== layer.size) throw new Error(`layer ${layer.digest} is ${st.size} bytes, not ${layer.size}`)
      await fsp.chmod(sha256.at(hex(layer.digest)), 0o644)
    }
    for (const blob of [parts.config, parts.manifest])
      await fsp.writeFile(sha256.at(hex(blob.digest)), blob.body, { flag: 'wx', mode: 0o644 })
    await fsp.writeFile(root.at('oci-layout'), OCI_LAYOUT, { flag: 'wx', mode: 0o644 })
    await fsp.writeFile(root.at('index.json'), layoutIndex(parts, { [REF_NAME_ANNOTATION]: refName }), {
      flag: 'wx',
      mode: 0o644,
    })
    fs.fchmodSync(root.fd, 0o755)
    const ours = fs.fstatSync(root.fd)
    try {
      // Never over a file or a link (ENOTDIR) nor a directory with entries (ENOTEMPTY).
      fs.renameSync(dir.at(staging), dir.at(name))
    } catch (err) {
      throw targetError(err, target)
    }
    const placed = fs.lstatSync(dir.at(name))
    // Someone renamed the staging directory away and put theirs in its place: not ours to keep.
    if (placed.ino !== ours.ino || placed.dev !== ours.dev) throw exists(target)
  } catch (err) {
    for (const d of held) d.close()
    held.length = 0
    await fsp.rm(dir.at(staging), { recursive: true, force: true }).catch(() => {})
    throw err
  } finally {
    for (const d of held) d.close()
    dir.close()
  }
}
