/**
 * Artifacts: files of a sandbox kept on the host when it ends, however it ends. The agent
 * archives the configured globs into its control dir as the last act of its shutdown
 * (agent/lifecycle/artifacts.go); whoever retires the sandbox, this process (stop, idle, TTL, crash) or
 * the reaper when no krunbox process is left, copies the archive out to `<to>/<id>.tar` and
 * what was kept to `<to>/<id>.json`, each through a temporary name and a rename.
 * `to` may be a directory other local users can write to (a shared /tmp-like one), and the id is
 * in `ps`: every write goes through the directory held open by fd (host-dir.ts), as a fresh file
 * of an unpredictable name renamed into place, and only into the directory chosen at create.
 */
import fs from 'node:fs'
import path from 'node:path'
import { absolutePath, assertObject, intInRange, oneOf, optionsObject, stringArray } from './options.js'
import { readBoundedJsonChecked } from './bounded-json.js'
import { ARTIFACTS_MAX_BYTES, ARTIFACTS_MAX_PATHS } from './defaults.js'
import { MESSAGES } from './protocol/contract.gen.js'
import { errors } from './protocol/errors.gen.js'
import { HostDir, type DirIdentity } from './host-dir.js'

export const ARTIFACT_WHEN = ['always', 'on_success', 'on_failure'] as const
export type ArtifactWhen = (typeof ARTIFACT_WHEN)[number]

export interface ArtifactsOptions {
  /** Absolute paths or globs inside the sandbox (`/workspace/out/*.json`); a directory is kept whole. */
  paths: string[]
  /** The host directory that receives `<sandboxId>.tar` and `<sandboxId>.json` (created if missing). */
  to: string
  /** always (default), on_success (no command ended badly), on_failure (one did). */
  when?: ArtifactWhen
  /** Cap on the files' bytes (default 1 GiB); past it later files are left out and the record says S403. */
  maxBytes?: number
}

export interface ArtifactsConfig {
  paths: string[]
  to: string
  when: ArtifactWhen
  maxBytes: number
  /** The directory `to` was at create: collection refuses any other (a parent swapped for a link since). */
  dir?: DirIdentity
}

/** What was kept, as the sandbox's record (list({ includeHistorical })) names it. */
export interface ArtifactsRecord {
  tar: string
  files: string[]
  bytes: number
  truncated: boolean
  /** S403: over maxBytes (what fit was kept); S216: archiving failed; S205: the sandbox left no archive (killed before its shutdown). */
  error: string | null
  message: string | null
}

/** The archive may exceed the files' bytes by tar's headers and padding. */
const TAR_SLACK = 64 * 1024 * 1024
const MANIFEST_MAX = 1024 * 1024

export function artifactsOption(value: unknown): ArtifactsConfig | undefined {
  if (value === undefined) return undefined
  assertObject(value, 'artifacts')
  const o = optionsObject(value, 'artifacts', ['paths', 'to', 'when', 'maxBytes'])
  const { paths, to, maxBytes } = exportTarget(o, 'artifacts')
  const when = oneOf(o.when, 'artifacts.when', ARTIFACT_WHEN, 'always')
  return { paths, to, when, maxBytes, dir: artifactsDirectory(to) }
}

/**
 * What create's artifacts and exec's collect share: the paths to export (1 to the cap, each
 * absolute), the host directory `to` (resolved) and the byte cap. `option` names the option.
 */
export function exportTarget(
  o: Record<string, unknown>,
  option: string,
): { paths: string[]; to: string; maxBytes: number } {
  const paths = stringArray(o.paths, `${option}.paths`)
  if (paths.length === 0 || paths.length > ARTIFACTS_MAX_PATHS)
    throw errors.badArgument({
      subject: `${option}.paths`,
      problem: `must list 1 to ${ARTIFACTS_MAX_PATHS} paths, got ${paths.length}`,
    })
  paths.forEach((p, i) => absolutePath(p, `${option}.paths[${i}]`))
  const to = path.resolve(absolutePath(o.to, `${option}.to`))
  const maxBytes = intInRange(o.maxBytes, `${option}.maxBytes`, 1, 2 ** 50, ARTIFACTS_MAX_BYTES)
  return { paths, to, maxBytes }
}

/**
 * Makes (or finds) the directory `to`, one component at a time: node's recursive mkdir never
 * returns for a path it cannot make under /proc, and it follows any link on the way. A link
 * owned by another user (who could point it anywhere) or anything but a directory is S001,
 * naming the path; what is left is the identity collection checks.
 */
export function artifactsDirectory(to: string, option = 'artifacts.to'): DirIdentity {
  const bad = (problem: string): never => {
    throw errors.badArgument({ subject: `${option} ${JSON.stringify(to)}`, problem })
  }
  const uid = process.geteuid?.() ?? 0
  let at = '/'
  for (const part of to.split('/').filter((p) => p !== '')) {
    at = path.join(at, part)
    let st = lstatOrNull(at)
    if (st === null) {
      try {
        fs.mkdirSync(at, { mode: 0o700 })
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') bad(`cannot be created: ${(err as Error).message}`)
      }
      st = lstatOrNull(at)
      if (st === null) bad(`cannot be created: ${at} vanished after its mkdir`)
    }
    if (st!.isSymbolicLink()) {
      if (st!.uid !== 0 && st!.uid !== uid)
        bad(`${at} is a symbolic link owned by uid ${st!.uid}, another user, who could point it anywhere`)
      const target = statOrNull(at)
      if (target === null || !target.isDirectory()) bad(`${at} is a symbolic link to no directory`)
    } else if (!st!.isDirectory()) {
      bad(`${at} is not a directory`)
    }
  }
  const st = statOrNull(to)
  if (st === null || !st.isDirectory()) bad('is not a directory')
  return { dev: st!.dev, ino: st!.ino }
}

function lstatOrNull(p: string): fs.Stats | null {
  try {
    return fs.lstatSync(p)
  } catch {
    return null
  }
}

function statOrNull(p: string): fs.Stats | null {
  try {
    return fs.statSync(p)
  } catch {
    return null
  }
}

/**
 * Copies the agent's archive and manifest out of a control dir once the sandbox has ended
 * (nothing writes there any more) to `<to>/<id>.tar` and `<to>/<id>.json`. A sandbox killed
 * before its shutdown ran leaves no archive: the manifest then says S205. Never throws.
 */
export function collectArtifacts(controlDir: string, id: string, config: ArtifactsConfig): void {
  let to: HostDir
  try {
    // The last component never through a link; a `to` swapped since create is refused.
    to = HostDir.open(config.to, config.dir)
  } catch {
    // Nowhere safe to write even the manifest: the record then says nothing was collected.
    return
  }
  try {
    const copied = copyCapped(path.join(controlDir, 'artifacts.tar'), to, `${id}.tar`, config.maxBytes + TAR_SLACK)
    if (copied && copyCapped(path.join(controlDir, 'artifacts.json'), to, `${id}.json`, MANIFEST_MAX)) return
    // A clean shutdown (exit.json) that archived nothing chose not to (`when`).
    if (!copied && fs.existsSync(path.join(controlDir, 'exit.json'))) return
    // The reaper may have copied them and removed the control dir first: S205 never replaces a manifest.
    // The reaper writes the same text (native/src/reaper/krunbox_reaper.c).
    const message = MESSAGES.connectionLost({
      subject: 'the sandbox',
      problem: 'ended without archiving its artifacts (killed before its shutdown ran)',
    })
    writeAtomic(to, `${id}.json`, JSON.stringify({ files: [], bytes: 0, truncated: false, error: 'S205', message }), {
      replace: false,
    })
  } catch (err) {
    // For a file over its cap the reaper writes the same text (native/src/reaper/krunbox_reaper.c).
    writeAtomic(
      to,
      `${id}.json`,
      JSON.stringify({
        files: [],
        bytes: 0,
        truncated: false,
        error: 'S216',
        message: MESSAGES.fsIO({
          path: config.to,
          reason: `cannot copy the artifacts there: ${(err as Error).message}`,
        }),
      }),
    )
  } finally {
    to.close()
  }
}

/** Copies a regular file (never through a link) of at most max bytes to `dest` in `to` via a fresh temp file; false if there is none. */
function copyCapped(source: string, to: HostDir, dest: string, max: number): boolean {
  let fd: number
  try {
    fd = fs.openSync(source, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK)
  } catch {
    return false
  }
  let tmp: string | null = null
  try {
    const st = fs.fstatSync(fd)
    if (!st.isFile()) return false
    if (st.size > max) throw new Error(`the archive is ${st.size} bytes, over the cap of ${max}`)
    const out = to.createTemp(dest)
    tmp = out.name
    try {
      const buf = Buffer.allocUnsafe(1024 * 1024)
      let total = 0
      for (;;) {
        const n = fs.readSync(fd, buf, 0, buf.length, null)
        if (n === 0) break
        total += n
        if (total > max) throw new Error(`the archive grew over the cap of ${max} bytes`)
        fs.writeSync(out.fd, buf, 0, n)
      }
      fs.fsyncSync(out.fd)
    } finally {
      fs.closeSync(out.fd)
    }
    to.rename(tmp, dest)
    tmp = null
    return true
  } finally {
    if (tmp !== null) to.unlink(tmp)
    fs.closeSync(fd)
  }
}

/** Writes `name` in `to` through a fresh temp file; with replace: false, only if it does not exist yet (link, not rename). */
export function writeAtomic(to: HostDir, name: string, data: string, { replace = true } = {}): void {
  let tmp: string | null = null
  try {
    const out = to.createTemp(name)
    tmp = out.name
    try {
      fs.writeSync(out.fd, data)
    } finally {
      fs.closeSync(out.fd)
    }
    if (replace) {
      to.rename(tmp, name)
      tmp = null
    } else to.link(tmp, name)
  } catch {
    // EEXIST without replace: what is there stays. Anything else: nothing is written.
  } finally {
    if (tmp !== null) to.unlink(tmp)
  }
}

/**
 * What was kept of sandbox `id` in `to`, read back and checked (the manifest is the sandbox's word);
 * null if nothing was collected. `to` may be shared with other users, so it is read as it was
 * written: through the directory held open, the one chosen at create (`dir`), and never through a
 * link planted at `<id>.json`. A `to` swapped since, or a manifest that is a link or no regular
 * file, is S216 in the record, and nothing is read through it.
 */
export function readArtifactsRecord(to: string, id: string, dir?: DirIdentity): ArtifactsRecord | null {
  let held: HostDir
  try {
    held = HostDir.open(to, dir)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
    return refusedRecord(to, `is not the directory the artifacts were written to: ${(err as Error).message}`)
  }
  try {
    return readArtifactsRecordIn(held, id)
  } finally {
    held.close()
  }
}

/** readArtifactsRecord in a directory already held open. */
export function readArtifactsRecordIn(to: HostDir, id: string): ArtifactsRecord | null {
  const name = `${id}.json`
  const got = readBoundedJsonChecked(to.at(name), MANIFEST_MAX)
  if (got.kind === 'missing') return null
  const file = path.join(to.path, name)
  if (got.kind === 'link') return refusedRecord(file, 'is a symbolic link (not followed)')
  if (got.kind === 'notRegular') return refusedRecord(file, 'is not a regular file (not read)')
  if (got.kind === 'tooLarge') return refusedRecord(file, `is over ${MANIFEST_MAX} bytes (not read)`)
  if (got.kind === 'unreadable') return refusedRecord(file, `cannot be read: ${got.reason}`)
  const m = got.value as Record<string, unknown> | null
  if (!m || typeof m !== 'object') return null
  let tarIsFile = false
  try {
    tarIsFile = fs.lstatSync(to.at(`${id}.tar`)).isFile()
  } catch {}
  return {
    tar: tarIsFile ? path.join(to.path, `${id}.tar`) : '',
    files: Array.isArray(m.files) ? m.files.filter((f): f is string => typeof f === 'string').slice(0, 100_000) : [],
    bytes: typeof m.bytes === 'number' && Number.isSafeInteger(m.bytes) ? m.bytes : 0,
    truncated: m.truncated === true,
    error: typeof m.error === 'string' && /^S\d{3}$/.test(m.error) ? m.error : null,
    message: typeof m.message === 'string' ? m.message.slice(0, 1024) : null,
  }
}

function refusedRecord(file: string, reason: string): ArtifactsRecord {
  return {
    tar: '',
    files: [],
    bytes: 0,
    truncated: false,
    error: 'S216',
    message: MESSAGES.fsIO({ path: file, reason }),
  }
}

/** A directory identity read back from a record (a history line), or undefined if it is none. */
export function validDirIdentity(value: unknown): DirIdentity | undefined {
  if (typeof value !== 'object' || value === null) return undefined
  const { dev, ino } = value as Record<string, unknown>
  return Number.isSafeInteger(dev) && Number.isSafeInteger(ino) ? { dev: dev as number, ino: ino as number } : undefined
}
