/**
 * exec({ collect, collectOn }): the files a command leaves, exported when it ends, to the
 * caller's directory as `<to>/<commandId>.tar` and `<to>/<commandId>.json`, the record shape of a
 * sandbox's artifacts (lib/artifacts.ts). The globs are expanded with fs.ls, each match is
 * archived by the agent (fs.tarCreate, links kept as links) and repacked under its absolute
 * path, at most maxBytes of file contents. The tar comes from the sandbox: names that would
 * leave their match are dropped, and nothing of it is ever unpacked here. `to` is checked and
 * written as create's artifacts.to is (lib/artifacts.ts, lib/host-dir.ts): through the directory
 * held open, fresh temporaries renamed into place, only into the directory chosen at exec.
 */
import fs from 'node:fs'
import { pipeline } from 'node:stream/promises'
import tar from 'tar-stream'
import {
  ARTIFACT_WHEN,
  artifactsDirectory,
  exportTarget,
  readArtifactsRecordIn,
  writeAtomic,
  type ArtifactsRecord,
  type ArtifactWhen,
} from './artifacts.js'
import { HostDir, type DirIdentity } from './host-dir.js'
import type { CommandResult } from './command.js'
import { FILE_READ_WINDOW_BYTES } from './defaults.js'
import { SandboxError } from './errors.js'
import type { SandboxFs } from './fs.js'
import { oneOf, optionsObject } from './options.js'
import type { AgentConnection } from './protocol/client.js'
import { creditedReadable } from './protocol/credited-readable.js'
import { MESSAGES } from './protocol/contract.gen.js'
import { errors } from './protocol/errors.gen.js'

/** exec()'s `collect`: what to export when the command ends, and where. */
export interface CollectOptions {
  /** Absolute paths or globs inside the sandbox (`/workspace/out/*.json`); a directory is kept whole. */
  paths: string[]
  /** The host directory that receives `<commandId>.tar` and `<commandId>.json` (created if missing). */
  to: string
  /** Cap on the files' bytes (default 1 GiB); past it later files are left out and the record says S403. */
  maxBytes?: number
}

export interface CollectConfig {
  paths: string[]
  to: string
  maxBytes: number
  when: ArtifactWhen
  /** The directory `to` was at exec: the export refuses any other. */
  dir: DirIdentity
}

/** Most files one export lists (the sandbox's artifacts record reads back as many). */
const MAX_FILES = 100_000

/** Checks exec's collect and collectOn; undefined when there is nothing to collect. */
export function collectOption(collect: unknown, collectOn: unknown): CollectConfig | undefined {
  if (collect === undefined) {
    if (collectOn !== undefined)
      throw errors.badArgument({ subject: 'collectOn', problem: 'needs collect: { paths, to } to say what to export' })
    return undefined
  }
  const o = optionsObject(collect, 'collect', ['paths', 'to', 'maxBytes'])
  const { paths, to, maxBytes } = exportTarget(o, 'collect')
  const when = oneOf(collectOn, 'collectOn', ARTIFACT_WHEN, 'always')
  return { paths, to, maxBytes, when, dir: artifactsDirectory(to, 'collect.to') }
}

/** Whether collectOn asks for an export after this result (success: exited 0). */
export function collectWanted(when: ArtifactWhen, result: CommandResult): boolean {
  const succeeded = result.status === 'exited' && result.exitCode === 0
  return when === 'always' || (when === 'on_success') === succeeded
}

/** Exports the matches of config.paths; never throws: a failure is the record's error (the tar then is ''). */
export async function collectCommandFiles(
  files: SandboxFs,
  conn: AgentConnection,
  commandId: string,
  config: CollectConfig,
): Promise<ArtifactsRecord> {
  const manifest = {
    files: [] as string[],
    bytes: 0,
    truncated: false,
    error: null as string | null,
    message: null as string | null,
  }
  let to: HostDir
  try {
    to = HostDir.open(config.to, config.dir)
  } catch (err) {
    const message = MESSAGES.fsIO({
      path: config.to,
      reason: `cannot write the export there: ${(err as Error).message}`,
    })
    return { tar: '', ...manifest, error: 'S216', message }
  }
  const tarName = `${commandId}.tar`
  let tmp: string | null = null
  try {
    const out = to.createTemp(tarName)
    tmp = out.name
    const packer = tar.pack()
    const writing = pipeline(packer, fs.createWriteStream('', { fd: out.fd }))
    writing.catch(() => {})
    try {
      for (const pattern of config.paths) {
        for (const match of await expand(files, pattern))
          await archive(files, conn, match, packer, manifest, config.maxBytes)
      }
    } catch (err) {
      packer.destroy(err as Error)
      throw err
    }
    packer.finalize()
    await writing
    to.rename(tmp, tarName)
    tmp = null
  } catch (err) {
    const e =
      err instanceof SandboxError
        ? err
        : errors.fsIO({
            path: config.to,
            reason: `cannot write the export there: ${(err as Error)?.message ?? String(err)}`,
          })
    Object.assign(manifest, { error: e.code, message: e.message, files: [], bytes: 0, truncated: false })
    to.unlink(tarName)
  } finally {
    if (tmp !== null) to.unlink(tmp)
  }
  writeAtomic(to, `${commandId}.json`, JSON.stringify(manifest))
  try {
    return readArtifactsRecordIn(to, commandId) ?? { tar: '', ...manifest }
  } finally {
    to.close()
  }
}

/** The existing paths a pattern names, sorted, as Go's filepath.Glob would (the agent's artifacts use it). */
async function expand(files: SandboxFs, pattern: string): Promise<string[]> {
  let found = ['/']
  for (const part of pattern.split('/').filter((p) => p !== '' && p !== '.')) {
    const next: string[] = []
    for (const dir of found) {
      const base = dir === '/' ? '' : dir
      if (!/[*?[\\]/.test(part)) {
        next.push(`${base}/${part}`)
        continue
      }
      const matcher = segmentMatcher(part)
      const entries = await files.ls(dir).catch(() => [])
      for (const e of entries.map((x) => x.name).sort()) if (matcher.test(e)) next.push(`${base}/${e}`)
    }
    found = next
  }
  const existing: string[] = []
  for (const p of found)
    if (
      await files.stat(p).then(
        () => true,
        () => false,
      )
    )
      existing.push(p)
  return existing
}

/** One path segment of a glob as a RegExp: * any run, ? one character, [...] a class (never a /). */
function segmentMatcher(glob: string): RegExp {
  let re = ''
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]
    if (c === '*') re += '[^/]*'
    else if (c === '?') re += '[^/]'
    else if (c === '\\' && i + 1 < glob.length) re += escape(glob[++i])
    else if (c === '[') {
      const end = glob.indexOf(']', i + 2)
      if (end < 0) {
        re += '\\['
        continue
      }
      const body = glob.slice(i + 1, end).replace(/\\/g, '\\\\')
      re += `[${body.startsWith('^') ? `^${body.slice(1)}` : body}]`
      i = end
    } else re += escape(c)
  }
  return new RegExp(`^${re}$`, 's')
}

const escape = (c: string) => c.replace(/[.*+?^${}()|[\]\\/-]/g, '\\$&')

/** Adds one match: a directory whole (its own entry first), a file or link as itself. */
async function archive(
  files: SandboxFs,
  conn: AgentConnection,
  match: string,
  packer: tar.Pack,
  manifest: { files: string[]; bytes: number; truncated: boolean; error: string | null; message: string | null },
  maxBytes: number,
): Promise<void> {
  const root = match.slice(1)
  const st = await files.stat(match)
  if (st.isDir) await add(packer, { name: root, type: 'directory', mode: st.mode & 0o7777, mtime: new Date(st.mtime) })
  const extract = tar.extract()
  const source = creditedReadable(conn, 'fs.tarCreate', { path: match }, FILE_READ_WINDOW_BYTES, 1024 * 1024)
  const done = new Promise<void>((resolve, reject) => {
    extract.on('entry', (header, stream, next) => {
      const name = within(header.name)
      const full = st.isDir ? (name === '' ? null : `${root}/${name}`) : root
      const isFile = header.type === 'file' || header.type === 'contiguous-file'
      const size = header.size ?? 0
      const skip = () => {
        stream.on('end', next)
        stream.resume()
      }
      if (
        full === null ||
        (header.type !== 'directory' && header.type !== 'symlink' && header.type !== 'link' && !isFile)
      )
        return skip()
      if (isFile && (manifest.bytes + size > maxBytes || manifest.files.length >= MAX_FILES)) {
        if (!manifest.truncated)
          Object.assign(manifest, {
            truncated: true,
            error: 'S403',
            message: MESSAGES.artifactsOverCap({ capBytes: maxBytes, path: `/${full}` }),
          })
        return skip()
      }
      // A hard link names another entry of the agent's tar: it moves under the match with it.
      let linkname = header.linkname
      if (header.type === 'link') {
        const target = within(header.linkname ?? '')
        if (target === null || target === '') return skip()
        linkname = st.isDir ? `${root}/${target}` : root
      }
      const sink = packer.entry(
        {
          name: full,
          type: header.type,
          size: isFile ? size : 0,
          mode: header.mode,
          mtime: header.mtime,
          linkname,
          uid: header.uid,
          gid: header.gid,
        },
        (err) => {
          if (err) return reject(err)
          if (isFile) {
            manifest.bytes += size
            manifest.files.push(`/${full}`)
          }
          next()
        },
      )
      sink.on('error', reject)
      stream.on('error', reject)
      stream.pipe(sink)
    })
    extract.on('finish', resolve)
    extract.on('error', reject)
    source.on('error', reject)
  })
  source.pipe(extract)
  try {
    await done
  } finally {
    source.destroy()
  }
}

/** A name of the agent's tar kept beneath its match: '' for the match itself, null for one that would leave it. */
function within(name: string): string | null {
  const trimmed = name.replace(/\/+$/, '')
  if (trimmed === '' || trimmed === '.') return ''
  if (trimmed.startsWith('/') || trimmed.split('/').some((s) => s === '..')) return null
  return trimmed.replace(/^\.\//, '')
}

function add(packer: tar.Pack, header: Partial<tar.Header> & { name: string }): Promise<void> {
  return new Promise((resolve, reject) => packer.entry(header as tar.Header, (err) => (err ? reject(err) : resolve())))
}
