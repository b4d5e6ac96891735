/**
 * sb.fs: filesystem operations executed by the agent inside the sandbox, so they see exactly
 * what commands see. Large data streams in frames under flow control; writes are atomic.
 */
import { constants as bufferConstants } from 'node:buffer'
import fs from 'node:fs'
import fsp from 'node:fs/promises'
import path from 'node:path'
import { PassThrough, Readable } from 'node:stream'
import { SandboxError } from './errors.js'
import { hostPathError } from './host-path-error.js'
import { HostDir } from './host-dir.js'
import { writeSparse } from './sparse.js'
import { FILE_READ_WINDOW_BYTES, GREP_MAX_LINE_BYTES, GREP_MAX_MATCHES } from './defaults.js'
import { assertInternal, INTERNAL } from './internal.js'
import {
  describe,
  intInRange,
  isWellFormed,
  oneOf,
  optionalAbortSignal,
  optionalBoolean,
  optionsObject,
} from './options.js'
import type { AgentConnection, AgentStream } from './protocol/client.js'
import { FrameError } from './protocol/frame.js'
import type {
  FsChmodRequest,
  FsEntryWire,
  FsSedRequest,
  GrepMatchWire,
  OpName,
  OpRequest,
  OpResponse,
  SedResultWire,
} from './protocol/contract.gen.js'
import { withSpan } from './telemetry.js'
import { MESSAGES } from './protocol/contract.gen.js'
import { errors } from './protocol/errors.gen.js'

export type FileEntry = FsEntryWire
export interface FileMeta {
  /** Bytes. */
  size: number
  /** Permission bits, e.g. 0o644. */
  mode: number
  /** Last modification, ms since the epoch. */
  mtime: number
}
export type GrepMatch = GrepMatchWire
export type SedFileResult = SedResultWire

/** What readFile holds in memory unless told otherwise: 256 MiB, or less where a Buffer cannot be that long. */
export const READ_FILE_MAX_BYTES = Math.min(256 * 1024 * 1024, bufferConstants.MAX_LENGTH)
/** What a download writes to the host unless told otherwise (the files' full, expanded sizes). */
export const DOWNLOAD_MAX_BYTES = 16 * 1024 * 1024 * 1024

/** A cap on what a transfer out of the sandbox may bring to the host. */
interface TransferCap {
  maxBytes: number
  /** What the S404 names ("the file", "the download"). */
  what: string
  /** How to ask for more, appended to the S404 message. */
  fix: string
}

/** S404: a transfer over its cap, naming the path, its size and the cap. */
export function overSizeCap(p: string, cap: TransferCap, size: number): SandboxError {
  return errors.overSizeCap({ path: p, what: cap.what, size, capBytes: cap.maxBytes, fix: cap.fix })
}

/** PATH_MAX: no longer path can name anything. */
const MAX_PATH = 4096

/** S210 for a malformed path argument: the template leads with the value, the reason names the argument. */
function badPath(value: unknown, name: string, problem: string): SandboxError {
  return errors.fsBadRequest({ path: describe(value), reason: `${name} ${problem}` })
}

function remotePath(value: unknown, name = 'path'): string {
  if (typeof value !== 'string' || value.length === 0) throw badPath(value, name, 'must be a non-empty absolute path')
  if (!value.startsWith('/')) throw badPath(value, name, 'must be an absolute path inside the sandbox')
  if (value.includes('\0')) throw badPath(value, name, 'contains a NUL byte')
  if (!isWellFormed(value)) throw badPath(value, name, 'is not valid Unicode (a lone surrogate has no UTF-8 form)')
  if (value.length > MAX_PATH)
    throw badPath(value, name, `is ${value.length} characters long, longer than any path (${MAX_PATH})`)
  return value
}

/** A host path given to upload/download. */
function hostPath(value: unknown): string {
  if (typeof value !== 'string' || value.length === 0)
    throw badPath(value, 'localPath', 'must be a non-empty host path')
  if (value.includes('\0')) throw badPath(value, 'localPath', 'contains a NUL byte')
  if (!isWellFormed(value))
    throw badPath(value, 'localPath', 'is not valid Unicode (a lone surrogate has no UTF-8 form)')
  return value
}

function notFileOrDir(file: string): SandboxError {
  return errors.fsWrongType({
    path: `local path ${describe(file)}`,
    reason: 'neither a regular file nor a directory (FIFO, socket or device); it is not uploaded',
  })
}

/** An AbortSignal that fired before the call started: S206, like an exec aborted by its caller. */
function throwIfAborted(signal: AbortSignal | undefined, what: string): void {
  if (signal?.aborted)
    throw errors.aborted(
      { subject: `${what}`, problem: 'was aborted by the caller before it started' },
      { cause: signal.reason },
    )
}

/** Modes as numbers (0o755) or octal strings ('0755'). */
function fileMode(value: unknown, name: string, fallback: number): number {
  if (value === undefined) return fallback
  if (typeof value === 'string' && /^0?[0-7]{3,4}$/.test(value)) return parseInt(value, 8)
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > 0o7777)
    throw new SandboxError('S210', `${name} must be an integer mode between 0 and 0o7777, got ${describe(value)}`)
  return value
}

/** An entry as the contract checked it, without the fields a newer agent may add. */
function entry(o: FileEntry): FileEntry {
  return { name: o.name, isDir: o.isDir, isSymlink: o.isSymlink, size: o.size, mode: o.mode, mtime: o.mtime }
}

let create!: (connection: () => AgentConnection) => SandboxFs

export class SandboxFs {
  #conn: () => AgentConnection

  static {
    create = (connection) => new this(INTERNAL, connection)
  }

  /** Every sandbox has one: `sb.fs`. */
  private constructor(key: typeof INTERNAL, connection: () => AgentConnection) {
    assertInternal(key, 'SandboxFs', 'sb.fs')
    this.#conn = connection
  }

  async ls(dir: string): Promise<FileEntry[]> {
    const body = await this.#call('fs.ls', { path: remotePath(dir) })
    return body.entries.map(entry)
  }

  async stat(p: string): Promise<FileEntry> {
    return entry(await this.#call('fs.stat', { path: remotePath(p) }))
  }

  async mkdir(p: string, options?: { mode?: number | string; parents?: boolean }): Promise<{ created: boolean }> {
    const o = optionsObject(options, 'mkdir options', ['mode', 'parents'])
    const body = await this.#call('fs.mkdir', {
      path: remotePath(p),
      mode: fileMode(o.mode, 'mode', 0o755),
      parents: optionalBoolean(o.parents, 'parents', false),
    })
    return { created: body.created }
  }

  /** Writes atomically (temp file beside the target, fsync, rename). An aborted source leaves the target untouched (S218). */
  async writeFile(
    p: string,
    data: string | Buffer | Readable,
    options?: { mode?: number | string; parents?: boolean; signal?: AbortSignal },
  ): Promise<{ bytes: number }> {
    const target = remotePath(p)
    const o = optionsObject(options, 'writeFile options', ['mode', 'parents', 'signal'])
    const mode = fileMode(o.mode, 'mode', 0o644)
    const parents = optionalBoolean(o.parents, 'parents', false)
    const signal = optionalAbortSignal(o.signal, 'signal')
    if (typeof data !== 'string' && !Buffer.isBuffer(data) && !(data instanceof Readable)) {
      throw errors.fsBadRequest({
        path: target,
        reason: `data must be a string, Buffer or Readable, got ${describe(data)}`,
      })
    }
    throwIfAborted(signal, `writeFile of ${target}`)
    return withSpan('krunbox.fs.write', { 'krunbox.path': target }, async () => {
      const stream = this.#conn().request('fs.write', { path: target, mode, parents })
      const body = await this.#upload(
        stream,
        target,
        data,
        signal,
        'upload aborted by the caller; the target is untouched',
      )
      return { bytes: body.bytes }
    })
  }

  /**
   * Reads a whole file into memory (use createReadStream for large files). Returns the bytes in
   * `data` beside the file's `size`, `mode` and `mtime` (ms), taken from the same open file, so
   * they describe exactly the content read: `(await sb.fs.readFile(p)).data` is the Buffer, or
   * with `encoding: 'utf8'` the text. `String(await sb.fs.readFile(p))` is the text either way.
   * A file over `maxBytes` (default READ_FILE_MAX_BYTES, 256 MiB) is S404, refused on its
   * announced size before any of it is read; an `encoding` other than 'utf8' or 'buffer' is S001.
   */
  async readFile(
    p: string,
    options: { maxBytes?: number; encoding: 'utf8' },
  ): Promise<FileMeta & { data: string; toString(): string }>
  /** As above, `data` the bytes (the default, `encoding: 'buffer'`). */
  async readFile(
    p: string,
    options?: { maxBytes?: number; encoding?: 'buffer' },
  ): Promise<FileMeta & { data: Buffer; toString(): string }>
  async readFile(
    p: string,
    options?: { maxBytes?: number; encoding?: 'utf8' | 'buffer' },
  ): Promise<FileMeta & { data: Buffer | string; toString(): string }> {
    const target = remotePath(p)
    const o = optionsObject(options, 'readFile options', ['maxBytes', 'encoding'])
    const maxBytes = intInRange(o.maxBytes, 'maxBytes', 0, bufferConstants.MAX_LENGTH, READ_FILE_MAX_BYTES)
    const encoding = oneOf(o.encoding, 'encoding', ['utf8', 'buffer'] as const, 'buffer')
    // Checked against the size the agent announces, before anything is held (never a RangeError).
    const cap = {
      maxBytes,
      what: 'the file',
      fix: '; read it with createReadStream or download, or pass a larger maxBytes',
    }
    const { stream, ...meta } = await this.#openDownload('fs.read', { path: target }, cap)
    const parts: Buffer[] = []
    for await (const piece of stream) parts.push(piece as Buffer)
    const bytes = Buffer.concat(parts)
    const result = { ...meta, data: encoding === 'utf8' ? bytes.toString('utf8') : bytes }
    // String(await readFile(p)) is the text; not enumerable, so spreads and JSON keep the four fields.
    Object.defineProperty(result, 'toString', { value: () => bytes.toString('utf8'), enumerable: false })
    return result
  }

  /**
   * Writes several files (each as writeFile: atomic, `mode` default 0o644, `parents` default
   * false), all at once over the connection. Resolves with each one's byte count in order; the
   * first failure rejects (files already written stay).
   */
  async writeFiles(
    files: Array<{ path: string; data: string | Buffer; mode?: number | string; parents?: boolean }>,
    options?: { signal?: AbortSignal },
  ): Promise<Array<{ path: string; bytes: number }>> {
    if (!Array.isArray(files))
      throw errors.fsBadRequest({ path: 'files', reason: `must be an array of { path, data }, got ${describe(files)}` })
    const o = optionsObject(options, 'writeFiles options', ['signal'])
    const checked = files.map((f, i) => {
      const entry = optionsObject(f, `files[${i}]`, ['path', 'data', 'mode', 'parents']) as {
        path: string
        data: string | Buffer
        mode?: number | string
        parents?: boolean
      }
      if (typeof entry.data !== 'string' && !Buffer.isBuffer(entry.data))
        throw errors.fsBadRequest({
          path: describe(entry.path),
          reason: `files[${i}].data must be a string or Buffer, got ${describe(entry.data)}`,
        })
      return { ...entry, path: remotePath(entry.path, `files[${i}].path`) }
    })
    const write = async (f: (typeof checked)[number]) => ({
      path: f.path,
      ...(await this.writeFile(f.path, f.data, {
        mode: f.mode,
        parents: f.parents,
        signal: o.signal as AbortSignal | undefined,
      })),
    })
    // Entries with `parents` go first, so the others may rely on the directories they make;
    // within each group the writes run at once. Results keep the order of `files`.
    const first = await Promise.all(checked.map((f) => (f.parents === true ? write(f) : null)))
    return Promise.all(checked.map((f, i) => first[i] ?? write(f)))
  }

  /** Streams a file out of the sandbox; the agent holds the file open for the whole stream. */
  async createReadStream(p: string): Promise<FileMeta & { stream: Readable }> {
    return this.#openDownload('fs.read', { path: remotePath(p) }, { maxBytes: Infinity, what: 'the file', fix: '' })
  }

  async rm(p: string, options?: { recursive?: boolean }): Promise<void> {
    const o = optionsObject(options, 'rm options', ['recursive'])
    await this.#call('fs.rm', { path: remotePath(p), recursive: optionalBoolean(o.recursive, 'recursive', false) })
  }

  async chmod(
    p: string,
    options: { mode?: number | string; uid?: number; gid?: number; recursive?: boolean },
  ): Promise<{ updated: number }> {
    const o = optionsObject(options, 'chmod options', ['mode', 'uid', 'gid', 'recursive'])
    const args: FsChmodRequest = { path: remotePath(p), recursive: optionalBoolean(o.recursive, 'recursive', false) }
    if (o.mode !== undefined) args.mode = fileMode(o.mode, 'mode', 0)
    if (o.uid !== undefined) args.uid = intInRange(o.uid, 'uid', 0, 2 ** 32 - 2)
    if (o.gid !== undefined) args.gid = intInRange(o.gid, 'gid', 0, 2 ** 32 - 2)
    if (args.mode === undefined && args.uid === undefined && args.gid === undefined)
      throw errors.fsBadRequest({ path: args.path, reason: 'chmod needs at least one of mode, uid, gid' })
    const body = await this.#call('fs.chmod', args)
    return { updated: body.updated }
  }

  async mv(src: string, dst: string, options?: { overwrite?: boolean }): Promise<void> {
    const o = optionsObject(options, 'mv options', ['overwrite'])
    await this.#call('fs.mv', {
      src: remotePath(src, 'src'),
      dst: remotePath(dst, 'dst'),
      overwrite: optionalBoolean(o.overwrite, 'overwrite', false),
    })
  }

  async grep(
    p: string,
    pattern: string,
    options?: {
      recursive?: boolean
      ignoreCase?: boolean
      include?: string | string[]
      exclude?: string | string[]
      maxMatches?: number
      maxLineBytes?: number
    },
  ): Promise<{ matches: GrepMatch[]; truncated: boolean }> {
    const o = optionsObject(options, 'grep options', [
      'recursive',
      'ignoreCase',
      'include',
      'exclude',
      'maxMatches',
      'maxLineBytes',
    ])
    if (typeof pattern !== 'string' || pattern.length === 0)
      throw new SandboxError('S210', `grep pattern must be a non-empty string, got ${describe(pattern)}`)
    const body = await this.#call('fs.grep', {
      path: remotePath(p),
      pattern,
      recursive: optionalBoolean(o.recursive, 'recursive', true),
      ignoreCase: optionalBoolean(o.ignoreCase, 'ignoreCase', false),
      include: globOption(o.include, 'include'),
      exclude: globOption(o.exclude, 'exclude'),
      maxMatches: intInRange(
        o.maxMatches,
        'maxMatches',
        GREP_MAX_MATCHES.min,
        GREP_MAX_MATCHES.max,
        GREP_MAX_MATCHES.default,
      ),
      maxLineBytes: intInRange(
        o.maxLineBytes,
        'maxLineBytes',
        GREP_MAX_LINE_BYTES.min,
        GREP_MAX_LINE_BYTES.max,
        GREP_MAX_LINE_BYTES.default,
      ),
    }).catch((err) => {
      throw namingPattern(err, pattern)
    })
    const matches = body.matches.map((m) => ({ path: m.path, line: m.line, content: m.content }))
    return { matches, truncated: body.truncated }
  }

  /** Line-oriented search and replace; `$1` refers to capture groups. Exactly one of files / path. */
  async sed(
    target:
      | { files: string[] }
      | { path: string; recursive?: boolean; include?: string | string[]; exclude?: string | string[] },
    pattern: string,
    replacement: string,
    options?: { regex?: boolean; firstOnly?: boolean; ignoreCase?: boolean },
  ): Promise<{ results: SedFileResult[]; totalReplacements: number }> {
    if (typeof target !== 'object' || target === null)
      throw new SandboxError('S210', `sed target must be { files } or { path }, got ${describe(target)}`)
    const t = optionsObject(target, 'sed target', ['files', 'path', 'recursive', 'include', 'exclude'])
    const hasFiles = t.files !== undefined
    const hasPath = t.path !== undefined
    if (hasFiles === hasPath)
      throw new SandboxError('S210', `sed needs exactly one of files or path, got ${hasFiles ? 'both' : 'neither'}`)
    if (typeof pattern !== 'string' || pattern.length === 0)
      throw new SandboxError('S210', `sed pattern must be a non-empty string, got ${describe(pattern)}`)
    if (typeof replacement !== 'string')
      throw new SandboxError('S210', `sed replacement must be a string, got ${describe(replacement)}`)
    const o = optionsObject(options, 'sed options', ['regex', 'firstOnly', 'ignoreCase'])
    const args: FsSedRequest = {
      pattern,
      replacement,
      regex: optionalBoolean(o.regex, 'regex', true),
      firstOnly: optionalBoolean(o.firstOnly, 'firstOnly', false),
      ignoreCase: optionalBoolean(o.ignoreCase, 'ignoreCase', false),
    }
    if (hasFiles) {
      if (!Array.isArray(t.files) || t.files.length === 0)
        throw new SandboxError('S210', `sed files must be a non-empty array of paths, got ${describe(t.files)}`)
      args.files = t.files.map((f, i) => remotePath(f, `files[${i}]`))
    } else {
      args.path = remotePath(t.path)
      args.recursive = optionalBoolean(t.recursive, 'recursive', true)
      args.include = globOption(t.include, 'include')
      args.exclude = globOption(t.exclude, 'exclude')
    }
    const body = await this.#call('fs.sed', args).catch((err) => {
      throw namingPattern(err, pattern)
    })
    const results = body.results.map((r) => ({
      path: r.path,
      replacements: r.replacements,
      success: r.success,
      ...(r.error !== undefined ? { error: r.error } : {}),
    }))
    return { results, totalReplacements: body.totalReplacements }
  }

  /**
   * Copies a host file or directory (as a tar stream) into the sandbox, streaming. `mode` applies
   * to the file, or to the directory itself; `parents` creates missing parents of `remote`.
   */
  async upload(
    localPath: string,
    remote: string,
    options?: { mode?: number | string; parents?: boolean; signal?: AbortSignal },
  ): Promise<{ bytes: number }> {
    const local = hostPath(localPath)
    const target = remotePath(remote)
    const o = optionsObject(options, 'upload options', ['mode', 'parents', 'signal'])
    const mode = o.mode === undefined ? undefined : fileMode(o.mode, 'mode', 0)
    const parents = optionalBoolean(o.parents, 'parents', false)
    const signal = optionalAbortSignal(o.signal, 'signal')
    throwIfAborted(signal, `upload of ${local}`)
    let st: fs.Stats
    let link: fs.Stats
    try {
      link = await fsp.lstat(local)
      st = link.isSymbolicLink() ? await fsp.stat(local) : link
    } catch (err) {
      throw hostPathError(err, local)
    }
    // A link another user owns could point at anything of ours (a root-only secret): not followed.
    const uid = process.geteuid?.() ?? 0
    if (link.isSymbolicLink() && link.uid !== 0 && link.uid !== uid) {
      throw errors.fsDenied({
        path: `local path ${describe(local)}`,
        reason: `is a symbolic link owned by uid ${link.uid}, another user; it is not followed`,
      })
    }
    if (st.isFile()) {
      // O_NONBLOCK: if a FIFO is swapped in after the stat, opening it must not block. O_NOFOLLOW
      // when it was no link: one swapped in since (by whoever can write its directory) is refused.
      const noFollow = link.isSymbolicLink() ? 0 : fs.constants.O_NOFOLLOW
      const handle = await fsp.open(local, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK | noFollow).catch((err) => {
        throw hostPathError(err, local)
      })
      if (!(await handle.stat()).isFile()) {
        await handle.close()
        throw notFileOrDir(local)
      }
      return this.writeFile(target, handle.createReadStream(), { mode: mode ?? st.mode & 0o777, parents, signal })
    }
    if (!st.isDirectory()) throw notFileOrDir(local)
    if (!parents) {
      const parent = path.posix.dirname(target)
      const meta = await this.stat(parent)
      if (!meta.isDir) throw errors.fsWrongType({ path: parent, reason: `not a directory (the parent of ${target})` })
    }
    const { pack } = await import('./tar.js')
    // Aborted while we looked at the paths: nothing was sent yet.
    throwIfAborted(signal, `upload of ${local}`)
    return withSpan('krunbox.fs.upload', { 'krunbox.path': target }, async () => {
      const packed = pack(local)
      const stream = this.#conn().request('fs.tarExtract', { path: target })
      try {
        await this.#upload(stream, target, packed.stream, signal, `upload of ${local} aborted by the caller`)
      } finally {
        packed.stream.destroy()
      }
      if (mode !== undefined) await this.#call('fs.chmod', { path: target, mode, recursive: false })
      return { bytes: packed.bytes() }
    })
  }

  /**
   * Copies a sandbox file (or a directory, unpacked from a tar stream) to the host. A directory
   * download never writes outside localPath, whatever the sandbox sends (see unpack in tar.ts).
   */
  async download(
    remote: string,
    localPath: string,
    options?: { parents?: boolean; maxBytes?: number },
  ): Promise<{ bytes: number }> {
    const source = remotePath(remote)
    const local = hostPath(localPath)
    const maxBytes = intInRange(
      optionsObject(options, 'download options', ['parents', 'maxBytes']).maxBytes,
      'maxBytes',
      0,
      Number.MAX_SAFE_INTEGER,
      DOWNLOAD_MAX_BYTES,
    )
    const cap = { maxBytes, what: 'the download', fix: '; pass a larger maxBytes to download it' }
    // parents: the host directories leading to localPath are made first (as mkdir -p).
    if (
      optionalBoolean(optionsObject(options, 'download options', ['parents', 'maxBytes']).parents, 'parents', false)
    ) {
      await fsp.mkdir(path.dirname(path.resolve(local)), { recursive: true }).catch((err) => {
        throw hostPathError(err, local)
      })
    }
    const st = await this.stat(source)
    if (st.isDir) {
      const { stream } = await this.#openDownload('fs.tarCreate', { path: source }, { ...cap, maxBytes: Infinity })
      const { unpack } = await import('./tar.js')
      try {
        // The cap binds the entries' announced sizes, checked before each is written.
        return await unpack(stream, local, { maxBytes, overCap: (size) => overSizeCap(source, cap, size) })
      } catch (err) {
        stream.destroy()
        throw err instanceof SandboxError ? err : hostPathError(err, local)
      }
    }
    const { stream } = await this.#openDownload('fs.read', { path: source }, cap)
    return writeDownloaded(stream, local)
  }

  async #call<O extends OpName>(op: O, args: OpRequest<O>): Promise<OpResponse<O>> {
    const where: unknown = Reflect.get(args, 'path') ?? Reflect.get(args, 'src') ?? ''
    return withSpan(`krunbox.${op}`, { 'krunbox.path': String(where) }, () => this.#conn().call(op, args))
  }

  /**
   * An upload on its stream: sends the bytes, then waits for the agent's answer. The caller's
   * signal (S218 with abortedBy) or a source that fails aborts it, and the rejection then waits
   * for the agent to remove what it wrote.
   */
  async #upload<O extends 'fs.write' | 'fs.tarExtract'>(
    stream: AgentStream<O>,
    target: string,
    data: string | Buffer | Readable,
    signal: AbortSignal | undefined,
    abortedBy: string,
  ): Promise<OpResponse<O>> {
    const abort = () =>
      stream.abortUpload(errors.fsAborted({ path: target, reason: abortedBy }, { cause: signal?.reason }))
    signal?.addEventListener('abort', abort, { once: true })
    try {
      void this.#send(stream, target, data)
      return await stream.result
    } finally {
      signal?.removeEventListener('abort', abort)
    }
  }

  /** Sends an upload's bytes and its END. It never rejects: a source that fails aborts the upload. */
  async #send<O extends 'fs.write' | 'fs.tarExtract'>(
    stream: AgentStream<O>,
    target: string,
    data: string | Buffer | Readable,
  ): Promise<void> {
    try {
      if (data instanceof Readable) {
        for await (const piece of data) await stream.sendData(Buffer.isBuffer(piece) ? piece : Buffer.from(piece))
      } else {
        await stream.sendData(Buffer.isBuffer(data) ? data : Buffer.from(data))
      }
      await stream.endData()
    } catch (err) {
      // A stream that is done or aborting failed the send itself: its result already says why.
      const reason = `upload aborted: the source stream failed (${(err as Error)?.message ?? String(err)}); the target is untouched`
      if (!stream.done) stream.abortUpload(errors.fsAborted({ path: target, reason }, { cause: err }))
    }
  }

  /**
   * Opens a download stream: resolves with the meta EVENT (fs.read) and a Readable under flow
   * control. The agent is held to its word: fs.read's DATA before its meta, or past the size it
   * announced, fails the stream (S204); a size or a total over the cap fails it with S404 before
   * the bytes are kept (a handler's throw cancels the stream, client.ts).
   */
  #openDownload(
    op: 'fs.read' | 'fs.tarCreate',
    args: { path: string },
    cap: TransferCap,
  ): Promise<FileMeta & { stream: Readable }> {
    const p = args.path
    return new Promise((resolve, reject) => {
      const out = new PassThrough({ highWaterMark: 1024 * 1024 })
      let meta: FileMeta = { size: 0, mode: 0, mtime: 0 }
      /** fs.read's announced size: no more may come. */
      let declared: number | null = null
      let received = 0
      let announced = false
      const announce = () => {
        if (announced) return
        announced = true
        resolve({ ...meta, stream: out })
      }
      const stream = this.#conn().request(
        op,
        { ...args, window: FILE_READ_WINDOW_BYTES },
        {
          manualCredit: true,
          onEvent: (e) => {
            if (e.type === 'meta') {
              meta = { size: e.size, mode: e.mode, mtime: e.mtime }
              if (op === 'fs.read') {
                if (declared !== null)
                  throw new FrameError(
                    'S204',
                    MESSAGES.badFrame({ subject: `fs.read of ${p}`, problem: 'announced its meta twice' }),
                  )
                declared = meta.size
                if (declared > cap.maxBytes) throw overSizeCap(p, cap, declared)
              }
              announce()
            }
          },
          onData: (data) => {
            received += data.length
            if (op === 'fs.read') {
              if (declared === null)
                throw new FrameError(
                  'S204',
                  MESSAGES.badFrame({ subject: `fs.read of ${p}`, problem: 'sent DATA before its meta event' }),
                )
              if (received > declared)
                throw new FrameError(
                  'S204',
                  MESSAGES.badFrame({
                    subject: `fs.read of ${p}`,
                    problem: `sent ${received} bytes, more than the ${declared} its meta announced`,
                  }),
                )
            }
            if (received > cap.maxBytes) throw overSizeCap(p, cap, received)
            announce()
            // Credit goes back only when the consumer has taken the bytes, so a slow reader slows the agent.
            if (out.write(data)) stream.consumed(data.length)
            else out.once('drain', () => stream.consumed(data.length))
          },
        },
      )
      out.on('close', () => {
        if (!stream.done) stream.cancel()
      })
      stream.result.then(
        () => {
          announce()
          out.end()
        },
        (err: SandboxError) => {
          if (!announced) {
            announced = true
            reject(err)
          } else out.destroy(err)
        },
      )
    })
  }
}

/**
 * Writes a downloaded file's bytes to local through a fresh temp file (O_EXCL, unpredictable
 * name) in its directory, held open so the rename lands where the temp was made; zero runs stay
 * holes. A directory another user can write to cannot redirect the write.
 */
async function writeDownloaded(stream: Readable, local: string): Promise<{ bytes: number }> {
  let dir: HostDir
  try {
    dir = HostDir.open(path.dirname(path.resolve(local)), undefined, { follow: true })
  } catch (err) {
    stream.destroy()
    throw hostPathError(err, local)
  }
  let tmp: string | null = null
  let bytes = 0
  try {
    const made = dir.createTemp(path.basename(local), 0o644)
    tmp = made.name
    const handle = await fsp.open(dir.at(tmp), fs.constants.O_WRONLY | fs.constants.O_NOFOLLOW)
    fs.closeSync(made.fd)
    try {
      bytes = await writeSparse(handle, stream)
      await handle.chmod(0o644 & ~process.umask())
    } finally {
      await handle.close()
    }
    dir.rename(tmp, path.basename(path.resolve(local)))
    tmp = null
    return { bytes }
  } catch (err) {
    stream.destroy()
    throw err instanceof SandboxError ? err : hostPathError(err, local)
  } finally {
    if (tmp !== null) dir.unlink(tmp)
    dir.close()
  }
}

/** The agent's S217 names the path; the caller also needs to see which pattern failed. */
function namingPattern(err: unknown, pattern: string): unknown {
  if (!(err instanceof SandboxError) || err.code !== 'S217') return err
  return new SandboxError('S217', `pattern ${describe(pattern)} does not compile: ${err.toJSON().message}`, {
    cause: err,
    details: err.details,
  })
}

/** Globs may be given as one string or a list; the agent always gets a list. */
function globOption(value: unknown, name: string): string[] | undefined {
  if (value === undefined) return undefined
  const list = Array.isArray(value) ? value : [value]
  for (const g of list) {
    if (typeof g !== 'string' || g.length === 0)
      throw new SandboxError('S210', `${name} must be a non-empty glob string or a list of them, got ${describe(g)}`)
  }
  return list as string[]
}

/** The fs of a new sandbox handle (Sandbox makes it; callers reach it as `sb.fs`). */
export function newSandboxFs(connection: () => AgentConnection): SandboxFs {
  return create(connection)
}
