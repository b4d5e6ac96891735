/**
 * Snapshots: what a sandbox wrote since boot (its overlay's upper layer, streamed by the agent
 * as a tar, see agent/fsops/snapshot.go), stored as an immutable, content-addressed layer that forks
 * boot from (image + layer, copy-on-write). Layout under `<stateDir>/.snapshots`:
 *   <id>/root/          the layer's files (owned by the sandbox id range on a root host)
 *   <id>/markers.json   { whiteouts, opaque }: the layer's deletions (agent/boot/layer.go)
 *   <id>/meta.json      SnapshotInfo
 *   .names/<name>       the id a name points to
 *   .users/<id>/<sb>    "pid start" of each live sandbox booted from <id>
 *   .exports/<id>.*     the layer an export made of <id> (images/oci/export.ts), kept for the next
 * A snapshot is staged inside the snapshotting sandbox's own state directory, so whoever removes
 * that directory (stop, or the reaper when the host died) removes a half-made snapshot too.
 * The tar comes from inside the sandbox and is untrusted: names, link targets and sizes are
 * checked (lib/untrusted-tar.ts), nothing is ever written through a link (every parent is a
 * directory this code made), modes lose setuid/setgid.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import type { Readable } from 'node:stream'
import type tar from 'tar-stream'
import { SANDBOX_ID_COUNT, sandboxIdMapping } from './drivers/idmap.js'
import { SandboxError } from './errors.js'
import { assertString, describe } from './options.js'
import type { AgentConnection } from './protocol/client.js'
import { creditedReadable } from './protocol/credited-readable.js'
import { SNAPSHOT_WINDOW_BYTES, SNAPSHOT_WRITE_BEHIND } from './defaults.js'
import { processStartTime } from './state.js'
import { writeFiles, type FileToWrite } from './native.js'
import { isAllZero } from './sparse.js'
import { readUntrustedTar, type TarEntry } from './untrusted-tar.js'
import { errors } from './protocol/errors.gen.js'
import { ImageCache } from './images/cache.js'
import type { ImageStore } from './images/store.js'
import type { ResolvedImage } from './images/types.js'
import { exportImage } from './images/oci/export.js'
import { exportPlan, type ExportOptions, type ExportPlan, type ExportResult } from './images/oci/export-options.js'

export interface SnapshotInfo {
  id: string
  name: string | null
  image: string
  imageVersion: string
  /** The snapshot the sandbox was itself booted from, whose files this layer includes. */
  parent: string | null
  createdAt: number
  /** Bytes of file content and entries (files, dirs, links) in the layer. */
  bytes: number
  entries: number
}

/** What `from` takes: a snapshot (as returned by sb.snapshot()), its id or its name. */
export type SnapshotRef = SnapshotInfo | string

const ID = /^[0-9a-f]{32}$/
const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/
const OPAQUE_PAX_KEY = 'KRUNBOX.opaque'
/**
 * What one snapshot's files may add up to, at their full (expanded) sizes: a sparse file costs
 * the sandbox nothing, so its announced size is what binds. The layer is refused (S404) at the
 * header of the file that would pass it, before any of that file is written.
 */
export const SNAPSHOT_MAX_BYTES = 16 * 1024 * 1024 * 1024
// The agent may run SNAPSHOT_WINDOW_BYTES ahead of the host, so reading the layer and writing it
// overlap. Small files are read whole and written off the event loop in batches, one libuv pool
// task per batch (native writeFiles), a bounded number at once (SNAPSHOT_WRITE_BEHIND).

interface Markers {
  whiteouts: string[]
  opaque: string[]
}

/**
 * What krunbox's own modules (the runtime, a sandbox's snapshot()) do to the store and a caller
 * must not. Exported from this module, never from lib/index.ts.
 */
export interface SnapshotStoreControl {
  /** The store under `<stateDir>/.snapshots` (each runtime makes one: `rt.snapshots`), exporting over `images`' cache. */
  create(root: string, images?: ImageStore): SnapshotStore
  /** Holds a snapshot in this process (a fork booting, a pool shaped on it) until the returned function is called. */
  hold(store: SnapshotStore, id: string): () => void
  /** Records a booted fork, so that other processes see the snapshot in use; the returned function forgets it. */
  recordUser(store: SnapshotStore, id: string, sandboxId: string, pid: number, startTime: string): () => void
  /**
   * Stores the agent's layer tar as a snapshot. The layer is staged in `stagingDir` (inside the
   * snapshotting sandbox's state directory) and renamed into the store; its id hashes the image
   * version, the parent and every byte of the tar, so the same layer is stored once.
   */
  capture(
    store: SnapshotStore,
    source: Readable,
    base: { image: string; imageVersion: string; parent: string | null; name?: string },
    stagingDir: string,
  ): Promise<SnapshotInfo>
  /**
   * sb.commit(): the layer tar staged as capture() stages it, exported as `plan` says, and the
   * staged layer removed whatever happened (a commit stores no snapshot).
   */
  commit(
    store: SnapshotStore,
    source: Readable,
    base: { image: string; imageVersion: string; parent: string | null; sandboxId: string },
    stagingDir: string,
    plan: ExportPlan,
  ): Promise<ExportResult>
}
let control!: SnapshotStoreControl

export class SnapshotStore {
  readonly root: string
  /** In-process holds (a fork booting, a pool shaped on the snapshot), by id. */
  readonly #holds = new Map<string, number>()
  readonly #images: ImageStore | null

  static {
    control = {
      create: (root, images) => new this(root, images ?? null),
      hold: (store, id) => store.#hold(id),
      recordUser: (store, id, sandboxId, pid, startTime) => store.#recordUser(id, sandboxId, pid, startTime),
      capture: (store, source, base, stagingDir) => store.#capture(source, base, stagingDir),
      commit: (store, source, base, stagingDir, plan) => store.#commit(source, base, stagingDir, plan),
    }
  }

  /** Every runtime has one: `rt.snapshots`. */
  private constructor(root: string, images: ImageStore | null) {
    this.root = root
    this.#images = images
  }

  /** The directory a fork binds (root/ and markers.json). */
  layerDir(id: string): string {
    if (typeof id !== 'string' || !ID.test(id))
      throw errors.badArgument({ subject: 'snapshot id', problem: `must be 32 hex digits, got ${describe(id)}` })
    return path.join(this.root, id)
  }

  /** A snapshot by handle, id or name; S108 when there is none. */
  resolve(ref: unknown, what = 'snapshot'): SnapshotInfo {
    let key: string
    if (typeof ref === 'object' && ref !== null && typeof (ref as SnapshotInfo).id === 'string')
      key = (ref as SnapshotInfo).id
    else {
      assertString(ref, what)
      key = ref
    }
    const info = this.get(key)
    if (!info) throw errors.noSnapshot({ what, key: describe(key), root: this.root })
    return info
  }

  get(ref: string): SnapshotInfo | null {
    let id = ref
    if (!ID.test(ref)) {
      if (!NAME.test(ref)) return null
      try {
        id = fs.readFileSync(path.join(this.root, '.names', ref), 'utf8').trim()
      } catch {
        return null
      }
    }
    if (!ID.test(id)) return null
    try {
      const meta = JSON.parse(fs.readFileSync(path.join(this.root, id, 'meta.json'), 'utf8')) as SnapshotInfo
      return { ...meta, id, name: this.#nameOf(id) }
    } catch {
      return null
    }
  }

  list(): SnapshotInfo[] {
    let entries: string[] = []
    try {
      entries = fs.readdirSync(this.root)
    } catch {}
    return entries
      .filter((e) => ID.test(e))
      .map((id) => this.get(id))
      .filter((s): s is SnapshotInfo => s !== null)
      .sort((a, b) => a.createdAt - b.createdAt)
  }

  /** Names a snapshot (a name points to one snapshot; naming another moves it); null removes its names. */
  name(ref: SnapshotRef, name: string | null): SnapshotInfo {
    const info = this.resolve(ref)
    const dir = path.join(this.root, '.names')
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 })
    if (name === null) {
      for (const n of this.#namesOf(info.id)) fs.rmSync(path.join(dir, n), { force: true })
      return { ...info, name: null }
    }
    snapshotName(name)
    const tmp = path.join(dir, `.${name}.${process.pid}.tmp`)
    fs.writeFileSync(tmp, info.id, { mode: 0o600 })
    fs.renameSync(tmp, path.join(dir, name))
    return { ...info, name }
  }

  /** Removes a snapshot and its names; S109 while a live sandbox or a pool uses it. */
  remove(ref: SnapshotRef): void {
    const info = this.resolve(ref)
    const users = this.#liveUsers(info.id)
    if ((this.#holds.get(info.id) ?? 0) > 0 || users.length > 0) {
      throw errors.snapshotInUse({
        snapshot: `${info.id}${info.name ? ` (${info.name})` : ''}`,
        users: users.length ? `by sandbox ${users.join(', ')}` : 'by a pool or a sandbox being created',
      })
    }
    for (const n of this.#namesOf(info.id)) fs.rmSync(path.join(this.root, '.names', n), { force: true })
    // Renamed away first: a fork that resolves the id from now on finds nothing half-removed.
    const trash = path.join(this.root, `.trash-${info.id}-${process.pid}`)
    fs.renameSync(this.layerDir(info.id), trash)
    fs.rmSync(trash, { recursive: true, force: true })
    fs.rmSync(path.join(this.root, '.users', info.id), { recursive: true, force: true })
    for (const f of safeList(path.join(this.root, '.exports')))
      if (f.startsWith(`${info.id}.`) || f.startsWith(`${info.id}-`))
        fs.rmSync(path.join(this.root, '.exports', f), { force: true })
  }

  /**
   * The snapshot as an OCI image over the image it was made on: written as an OCI image layout
   * or a `docker save`-compatible tar, or pushed to a registry (docs/images.md, "Export").
   * The snapshot cannot be removed meanwhile.
   */
  async export(ref: SnapshotRef, options: ExportOptions): Promise<ExportResult> {
    const plan = exportPlan(options)
    const info = this.resolve(ref)
    const release = this.#hold(info.id)
    try {
      return await exportImage(
        {
          ...(await this.#exportBase(info)),
          what: `snapshot ${info.id}`,
          layerDir: this.layerDir(info.id),
          layerCache: { dir: path.join(this.root, '.exports'), key: info.id },
        },
        plan,
      )
    } finally {
      release()
    }
  }

  /** The image a layer was made over, the very version, and where its cache keeps blobs. */
  async #exportBase(info: { image: string; imageVersion: string }): Promise<{
    image: ResolvedImage
    blobsRoot: string
    insecureRegistries: readonly string[]
  }> {
    const images = this.#images
    if (images === null) throw errors.unsupported({ op: 'export', why: 'on a snapshot store without an image cache' })
    const cache = new ImageCache(images.cacheDir)
    await cache.own()
    const manifest = await cache.readManifest(info.imageVersion)
    if (manifest === null)
      throw errors.imageUnknown({
        subject: `image ${info.image} version ${info.imageVersion}`,
        problem: `is no longer in the image cache ${images.cacheDir} (pruned or removed); an export needs the image the layer was made over`,
      })
    return {
      image: { name: info.image, id: info.imageVersion, rootfs: cache.layout.rootfs(info.imageVersion), manifest },
      blobsRoot: path.join(images.cacheDir, 'blobs'),
      insecureRegistries: images.insecureRegistries,
    }
  }

  #hold(id: string): () => void {
    this.#holds.set(id, (this.#holds.get(id) ?? 0) + 1)
    let held = true
    return () => {
      if (!held) return
      held = false
      const n = (this.#holds.get(id) ?? 1) - 1
      if (n > 0) this.#holds.set(id, n)
      else this.#holds.delete(id)
    }
  }

  #recordUser(id: string, sandboxId: string, pid: number, startTime: string): () => void {
    const dir = path.join(this.root, '.users', id)
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 })
    const file = path.join(dir, sandboxId)
    fs.writeFileSync(file, `${pid} ${startTime}`, { mode: 0o600 })
    return () => fs.rmSync(file, { force: true })
  }

  #liveUsers(id: string): string[] {
    const dir = path.join(this.root, '.users', id)
    let names: string[] = []
    try {
      names = fs.readdirSync(dir)
    } catch {}
    return names.filter((sandboxId) => {
      try {
        const [pid, start] = fs.readFileSync(path.join(dir, sandboxId), 'utf8').split(' ')
        if (processStartTime(Number(pid)) === start) return true
      } catch {}
      fs.rmSync(path.join(dir, sandboxId), { force: true })
      return false
    })
  }

  #namesOf(id: string): string[] {
    const dir = path.join(this.root, '.names')
    let names: string[] = []
    try {
      names = fs.readdirSync(dir)
    } catch {}
    return names.filter((n) => !n.startsWith('.') && safeRead(path.join(dir, n)) === id)
  }

  #nameOf(id: string): string | null {
    return this.#namesOf(id).sort()[0] ?? null
  }

  async #capture(
    source: Readable,
    base: { image: string; imageVersion: string; parent: string | null; name?: string },
    stagingDir: string,
  ): Promise<SnapshotInfo> {
    const info = await this.#stage(source, base, stagingDir)
    try {
      const target = this.layerDir(info.id)
      if (fs.existsSync(target)) fs.rmSync(stagingDir, { recursive: true, force: true })
      else moveInto(stagingDir, target)
      return base.name ? this.name(info.id, base.name) : (this.get(info.id) ?? info)
    } catch (err) {
      fs.rmSync(stagingDir, { recursive: true, force: true })
      throw captureError(err)
    }
  }

  async #commit(
    source: Readable,
    base: { image: string; imageVersion: string; parent: string | null; sandboxId: string },
    stagingDir: string,
    plan: ExportPlan,
  ): Promise<ExportResult> {
    const release = base.parent === null ? () => {} : this.#hold(base.parent)
    try {
      const exportBase = await this.#exportBase(base)
      await this.#stage(source, base, stagingDir)
      return await exportImage(
        { ...exportBase, what: `sandbox ${base.sandboxId}`, layerDir: stagingDir, layerCache: null },
        plan,
      )
    } finally {
      release()
      // Refused before the layer was read (its image gone): the agent's stream ends here.
      if (!source.readableEnded) source.destroy()
      fs.rmSync(stagingDir, { recursive: true, force: true })
    }
  }

  /** The agent's layer tar written into `stagingDir` (root/, markers.json, meta.json); removed again if that fails. */
  async #stage(
    source: Readable,
    base: { image: string; imageVersion: string; parent: string | null },
    stagingDir: string,
  ): Promise<SnapshotInfo> {
    fs.mkdirSync(this.root, { recursive: true, mode: 0o700 })
    fs.rmSync(stagingDir, { recursive: true, force: true })
    fs.mkdirSync(stagingDir, { mode: 0o700 })
    try {
      const hash = crypto.createHash('sha256').update(`${base.imageVersion}\n${base.parent ?? ''}\n`)
      const layer = new LayerWriter(path.join(stagingDir, 'root'))
      if (base.parent) layer.inherit(this.layerDir(base.parent))
      source.on('data', (chunk: Buffer) => hash.update(chunk))
      await layer.apply(source)
      const id = hash.digest('hex').slice(0, 32)
      const info: SnapshotInfo = {
        id,
        name: null,
        image: base.image,
        imageVersion: base.imageVersion,
        parent: base.parent,
        createdAt: Date.now(),
        bytes: layer.bytes,
        entries: layer.entries,
      }
      layer.finish()
      fs.writeFileSync(path.join(stagingDir, 'markers.json'), JSON.stringify(layer.markers()), { mode: 0o644 })
      fs.writeFileSync(path.join(stagingDir, 'meta.json'), JSON.stringify(info), { mode: 0o644 })
      fs.chmodSync(stagingDir, 0o755)
      return info
    } catch (err) {
      fs.rmSync(stagingDir, { recursive: true, force: true })
      throw captureError(err)
    }
  }
}

function captureError(err: unknown): SandboxError {
  if (err instanceof SandboxError) return err
  // A path of the layer can be as long as the host allows, or longer: the message is cut, the cause keeps it.
  const message = (err as Error).message
  const reason = message.length > 512 ? `${message.slice(0, 512)}…` : message
  return errors.snapshotFailed({ outcome: 'failed', reason }, { cause: err })
}

/** A valid snapshot name, or S001 naming it. */
export function snapshotName(name: unknown): string {
  assertString(name, 'snapshot name')
  if (!NAME.test(name) || ID.test(name))
    throw errors.badArgument({
      subject: `snapshot name ${describe(name)}`,
      problem: 'must be 1-63 characters of A-Z a-z 0-9 _ . - starting with a letter or digit, and not look like an id',
    })
  return name
}

/** Renames a staged snapshot into the store; across filesystems, copies it in beside, then renames. */
function moveInto(staged: string, target: string): void {
  try {
    fs.renameSync(staged, target)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EXDEV') throw err
    const tmp = `${target}.${process.pid}.tmp`
    fs.cpSync(staged, tmp, { recursive: true, verbatimSymlinks: true, preserveTimestamps: true })
    fs.renameSync(tmp, target)
    fs.rmSync(staged, { recursive: true, force: true })
  }
}

function safeList(dir: string): string[] {
  try {
    return fs.readdirSync(dir)
  } catch {
    return []
  }
}

function safeRead(file: string): string | null {
  try {
    return fs.readFileSync(file, 'utf8').trim()
  } catch {
    return null
  }
}

/** The agent's layer as a stream (sandbox.snapshot), with credit returned as it is consumed. */
export function layerStream(conn: AgentConnection): Readable {
  return creditedReadable(conn, 'sandbox.snapshot', {}, SNAPSHOT_WINDOW_BYTES)
}

type Kind = 'dir' | 'file' | 'other'

/**
 * Writes a layer from a tar of an overlay upper dir (optionally over a parent layer it first
 * hard-links). Tracks what it made by relative path: an entry is only ever written inside a
 * directory this writer made, so no link in the tar (or the parent) can redirect a write.
 */
class LayerWriter {
  /** The layer tar's file bytes and entries, once apply() has read it. */
  bytes = 0
  entries = 0
  readonly #root: string
  readonly #kinds = new Map<string, Kind>([['', 'dir']])
  readonly #whiteouts = new Set<string>()
  readonly #opaque = new Set<string>()
  readonly #dirModes: [string, number, number, number][] = []
  readonly #hostRoot = sandboxIdMapping()?.hostRoot ?? null
  /** Small files not yet on disk, by relative path: the (never rejecting) end of their batch. */
  readonly #writes = new Map<string, Promise<void>>()
  /** Small files gathered for the next native write (one libuv pool task per batch). */
  #batch = new WriteBatch()
  readonly #inFlight = new Set<Promise<void>>()
  #writeBytes = 0
  #writeError: Error | null = null

  constructor(root: string) {
    this.#root = root
    fs.mkdirSync(root, { mode: 0o755 })
  }

  /** Starts from a parent layer: its files hard-linked (layers never change), its markers kept. */
  inherit(parentDir: string): void {
    const markers = JSON.parse(fs.readFileSync(path.join(parentDir, 'markers.json'), 'utf8')) as Markers
    for (const w of markers.whiteouts) this.#whiteouts.add(w.slice(1))
    for (const o of markers.opaque) this.#opaque.add(o.slice(1))
    const walk = (rel: string) => {
      for (const entry of fs.readdirSync(path.join(parentDir, 'root', rel), { withFileTypes: true })) {
        const child = rel ? `${rel}/${entry.name}` : entry.name
        const from = path.join(parentDir, 'root', child)
        const to = path.join(this.#root, child)
        if (entry.isDirectory()) {
          const st = fs.lstatSync(from)
          fs.mkdirSync(to, { mode: 0o700 })
          this.#owned(to, st.uid, st.gid, true)
          this.#dirModes.push([to, st.mode & 0o1777, st.uid, st.gid])
          this.#kinds.set(child, 'dir')
          walk(child)
        } else {
          fs.linkSync(from, to)
          this.#kinds.set(child, entry.isFile() ? 'file' : 'other')
        }
      }
    }
    walk('')
  }

  async apply(source: Readable): Promise<void> {
    try {
      const read = await readUntrustedTar(source, (entry) => this.#place(entry), {
        maxBytes: SNAPSHOT_MAX_BYTES,
        overCap: (total, entry) =>
          errors.overSizeCap({
            path: `/${entry.path}`,
            what: 'the snapshot with this file',
            size: total,
            capBytes: SNAPSHOT_MAX_BYTES,
            fix: ' (files are counted at their full size, holes included); remove it or make it smaller before the snapshot',
          }),
        refuse: malformed,
        highWaterMark: 1024 * 1024,
      })
      this.bytes = read.bytes
      this.entries = read.entries
      await this.#settleWrites()
    } catch (err) {
      // Nothing may still be writing when the caller removes the staging directory.
      await this.#settleWrites().catch(() => {})
      throw err
    }
  }

  /** One entry of the layer, written only inside a directory this writer made. */
  async #place(entry: TarEntry): Promise<void> {
    const { path: rel, header: h } = entry
    if (entry.parts.length === 0) throw malformed(`entry ${describe(entry.name)} names the layer's root`)
    const parent = entry.parts.slice(0, -1).join('/')
    if (this.#kinds.get(parent) !== 'dir')
      throw malformed(`entry ${describe(entry.name)} is not inside a directory of the layer`)
    const abs = path.join(this.#root, rel)
    if (entry.kind === 'whiteout') {
      await this.#remove(rel, abs)
      this.#dropMarkersBelow(rel)
      this.#whiteouts.add(rel)
    } else if (entry.kind === 'directory') {
      const opaque = h.pax?.[OPAQUE_PAX_KEY] === 'y'
      if (this.#kinds.get(rel) !== 'dir' || opaque) {
        await this.#remove(rel, abs)
        fs.mkdirSync(abs, { mode: 0o700 })
        this.#kinds.set(rel, 'dir')
      }
      this.#owned(abs, h.uid ?? 0, h.gid ?? 0, true)
      this.#dirModes.push([abs, (h.mode ?? 0o755) & 0o1777, h.uid ?? 0, h.gid ?? 0])
      this.#whiteouts.delete(rel)
      if (opaque) this.#opaque.add(rel)
    } else if (entry.kind === 'file') {
      await this.#remove(rel, abs)
      if (entry.size <= SNAPSHOT_WRITE_BEHIND.fileMaxBytes) {
        this.#writeBehind(rel, abs, await wholeEntry(entry.content, entry.size), h)
        await this.#writeRoom()
      } else await this.#writeFile(entry.content, abs, h)
      this.#kinds.set(rel, 'file')
      this.#whiteouts.delete(rel)
    } else if (entry.kind === 'symlink') {
      await this.#remove(rel, abs)
      fs.symlinkSync(entry.target, abs)
      this.#owned(abs, h.uid ?? 0, h.gid ?? 0, false)
      this.#kinds.set(rel, 'other')
      this.#whiteouts.delete(rel)
    } else if (entry.kind === 'hardlink') {
      const target = entry.target.path
      if (this.#kinds.get(target) !== 'file')
        throw malformed(`hardlink ${describe(entry.name)} points to ${describe(h.linkname)}, not a file of the layer`)
      await this.#remove(rel, abs)
      await this.#written(target)
      fs.linkSync(path.join(this.#root, target), abs)
      this.#kinds.set(rel, 'file')
      this.#whiteouts.delete(rel)
    }
    // FIFOs and other devices are not kept.
  }

  /** Queues a small file for the next batch; sends the batch once it is big enough. */
  #writeBehind(rel: string, abs: string, data: Buffer, h: tar.Header): void {
    this.#writeBytes += data.length
    const owner =
      this.#hostRoot === null
        ? {}
        : { uid: hostId(this.#hostRoot, h.uid ?? 0), gid: hostId(this.#hostRoot, h.gid ?? 0) }
    // setuid/setgid never survive into a layer.
    this.#batch.add(rel, { path: abs, data, mode: (h.mode ?? 0o644) & 0o1777, ...owner, mtimeMs: h.mtime?.getTime() })
    this.#writes.set(rel, this.#batch.done)
    if (
      this.#batch.files.length >= SNAPSHOT_WRITE_BEHIND.batchFiles ||
      this.#batch.bytes >= SNAPSHOT_WRITE_BEHIND.batchBytes
    )
      this.#flush()
  }

  /** Sends the gathered files to the pool. */
  #flush(): void {
    const batch = this.#batch
    if (batch.files.length === 0) return
    this.#batch = new WriteBatch()
    const done = batch.send((err) => (this.#writeError ??= err))
    this.#inFlight.add(done)
    void done.then(() => {
      this.#inFlight.delete(done)
      this.#writeBytes -= batch.bytes
      for (const f of batch.rels) if (this.#writes.get(f) === done) this.#writes.delete(f)
    })
  }

  /** Waits until the small file at rel (if any) is on disk. */
  async #written(rel: string): Promise<void> {
    const pending = this.#writes.get(rel)
    if (pending === undefined) return
    if (pending === this.#batch.done) this.#flush()
    await pending
  }

  /** Waits for room under the write-behind bounds; throws the first failed write. */
  async #writeRoom(): Promise<void> {
    while (this.#inFlight.size >= SNAPSHOT_WRITE_BEHIND.batches || this.#writeBytes >= SNAPSHOT_WRITE_BEHIND.bytes) {
      if (this.#inFlight.size === 0) this.#flush()
      await Promise.race(this.#inFlight)
    }
    if (this.#writeError) throw this.#writeError
  }

  async #settleWrites(): Promise<void> {
    this.#flush()
    await Promise.all(this.#inFlight)
    if (this.#writeError) throw this.#writeError
  }

  /** Directory modes and owners last, so a read-only directory could still be filled. */
  finish(): void {
    for (const [dir, mode] of this.#dirModes.reverse()) fs.chmodSync(dir, mode)
  }

  markers(): Markers {
    return {
      whiteouts: [...this.#whiteouts].sort().map((p) => `/${p}`),
      opaque: [...this.#opaque].sort().map((p) => `/${p}`),
    }
  }

  async #writeFile(entry: AsyncIterable<Buffer>, abs: string, h: tar.Header): Promise<void> {
    // wx: a fresh file; its parent is a directory this writer made.
    const fd = fs.openSync(
      abs,
      fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW,
      0o600,
    )
    try {
      let at = 0
      for await (const chunk of entry) {
        // Zero runs are skipped (holes): a sparse file stays sparse in the layer.
        if (!isAllZero(chunk)) {
          let off = 0
          while (off < chunk.length) off += fs.writeSync(fd, chunk, off, chunk.length - off, at + off)
        }
        at += chunk.length
      }
      fs.ftruncateSync(fd, at)
      if (this.#hostRoot !== null)
        fs.fchownSync(fd, hostId(this.#hostRoot, h.uid ?? 0), hostId(this.#hostRoot, h.gid ?? 0))
      // setuid/setgid never survive into a layer.
      fs.fchmodSync(fd, (h.mode ?? 0o644) & 0o1777)
      if (h.mtime) fs.futimesSync(fd, h.mtime, h.mtime)
    } finally {
      fs.closeSync(fd)
    }
  }

  #owned(abs: string, uid: number, gid: number, isDir: boolean): void {
    if (this.#hostRoot === null) return
    if (isDir) fs.chownSync(abs, hostId(this.#hostRoot, uid), hostId(this.#hostRoot, gid))
    else fs.lchownSync(abs, hostId(this.#hostRoot, uid), hostId(this.#hostRoot, gid))
  }

  /** Removes what the layer has at rel (from the parent, or an earlier entry), once nothing writes there. */
  async #remove(rel: string, abs: string): Promise<void> {
    const kind = this.#kinds.get(rel)
    if (kind === undefined) return
    if (kind === 'dir') {
      await this.#settleWrites()
      fs.chmodSync(abs, 0o700)
      fs.rmSync(abs, { recursive: true, force: true })
      for (const k of [...this.#kinds.keys()]) if (k.startsWith(`${rel}/`)) this.#kinds.delete(k)
    } else {
      await this.#written(rel)
      fs.unlinkSync(abs)
    }
    this.#kinds.delete(rel)
  }

  #dropMarkersBelow(rel: string): void {
    for (const set of [this.#whiteouts, this.#opaque]) {
      for (const p of [...set]) if (p === rel || p.startsWith(`${rel}/`)) set.delete(p)
    }
  }
}

/** A tar entry's content as one buffer (no copy when it came in one chunk). */
async function wholeEntry(entry: AsyncIterable<Buffer>, size: number): Promise<Buffer> {
  const chunks: Buffer[] = []
  let n = 0
  for await (const chunk of entry) {
    chunks.push(chunk)
    n += chunk.length
  }
  if (n !== size) throw malformed(`an entry holds ${n} bytes where its header says ${size}`)
  return chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, n)
}

/** Files for one native writeFiles() call; `done` resolves (never rejects) once they are written or failed. */
class WriteBatch {
  readonly files: FileToWrite[] = []
  readonly rels: string[] = []
  bytes = 0
  readonly done: Promise<void>
  #resolve!: () => void

  constructor() {
    this.done = new Promise((resolve) => (this.#resolve = resolve))
  }

  add(rel: string, file: FileToWrite): void {
    this.rels.push(rel)
    this.files.push(file)
    this.bytes += file.data.length
  }

  send(onError: (err: Error) => void): Promise<void> {
    writeFiles(this.files).then(this.#resolve, (err: Error) => {
      onError(err)
      this.#resolve()
    })
    return this.done
  }
}

function hostId(base: number, id: number): number {
  return base + Math.min(id, SANDBOX_ID_COUNT - 1)
}

function malformed(message: string): SandboxError {
  return errors.snapshotFailed({ outcome: 'refused', reason: `the sandbox sent a malformed layer: ${message}` })
}

export { control as snapshotStoreControl }
