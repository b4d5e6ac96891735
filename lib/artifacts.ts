/**
 * Artifacts: files of a sandbox kept on the host when it ends, however it ends. The agent
 * archives the configured globs into its control dir as the last act of its shutdown
 * (agent/lifecycle/artifacts.go); whoever retires the sandbox, this process (stop, idle, TTL, crash) or
 * the reaper when no krunbox process is left, copies the archive out to `<to>/<id>.tar` and
 * what was kept to `<to>/<id>.json`, each through a temporary name and a rename.
 */
import fs from 'node:fs'
import path from 'node:path'
import { absolutePath, assertObject, fail, intInRange, oneOf, optionsObject, stringArray } from './options.js'
import { readBoundedJson } from './bounded-json.js'
import { ARTIFACTS_MAX_BYTES, ARTIFACTS_MAX_PATHS } from './defaults.js'
import { MESSAGES } from './protocol/contract.gen.js'

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
  const paths = stringArray(o.paths, 'artifacts.paths')
  if (paths.length === 0 || paths.length > ARTIFACTS_MAX_PATHS) fail('S001', MESSAGES.badArgument({ subject: 'artifacts.paths', problem: `must list 1 to ${ARTIFACTS_MAX_PATHS} paths, got ${paths.length}` }))
  paths.forEach((p, i) => absolutePath(p, `artifacts.paths[${i}]`))
  const to = path.resolve(absolutePath(o.to, 'artifacts.to'))
  try {
    fs.mkdirSync(to, { recursive: true, mode: 0o700 })
  } catch (err) {
    fail('S001', MESSAGES.badArgument({ subject: `artifacts.to ${JSON.stringify(to)}`, problem: `cannot be created: ${(err as Error).message}` }))
  }
  const when = oneOf(o.when, 'artifacts.when', ARTIFACT_WHEN, 'always')
  const maxBytes = intInRange(o.maxBytes, 'artifacts.maxBytes', 1, 2 ** 50, ARTIFACTS_MAX_BYTES)
  return { paths, to, when, maxBytes }
}

/**
 * Copies the agent's archive and manifest out of a control dir once the sandbox has ended
 * (nothing writes there any more) to `<to>/<id>.tar` and `<to>/<id>.json`. A sandbox killed
 * before its shutdown ran leaves no archive: the manifest then says S205. Never throws.
 */
export function collectArtifacts(controlDir: string, id: string, config: ArtifactsConfig): void {
  const manifest = path.join(config.to, `${id}.json`)
  try {
    const copied = copyCapped(path.join(controlDir, 'artifacts.tar'), path.join(config.to, `${id}.tar`), config.maxBytes + TAR_SLACK)
    if (copied && copyCapped(path.join(controlDir, 'artifacts.json'), manifest, MANIFEST_MAX)) return
    // A clean shutdown (exit.json) that archived nothing chose not to (`when`).
    if (!copied && fs.existsSync(path.join(controlDir, 'exit.json'))) return
    // The reaper may have copied them and removed the control dir first: S205 never replaces a manifest.
    // The reaper writes the same text (native/src/krunbox_reaper.c).
    const message = MESSAGES.connectionLost({ subject: 'the sandbox', problem: 'ended without archiving its artifacts (killed before its shutdown ran)' })
    writeAtomic(manifest, JSON.stringify({ files: [], bytes: 0, truncated: false, error: 'S205', message }), { replace: false })
  } catch (err) {
    // For a file over its cap the reaper writes the same text (native/src/krunbox_reaper.c).
    writeAtomic(manifest, JSON.stringify({ files: [], bytes: 0, truncated: false, error: 'S216', message: MESSAGES.fsIO({ path: config.to, reason: `cannot copy the artifacts there: ${(err as Error).message}` }) }))
  }
}

/** Copies a regular file (never through a link) of at most max bytes to dest via a temp name; false if there is none. */
function copyCapped(source: string, dest: string, max: number): boolean {
  let fd: number
  try {
    fd = fs.openSync(source, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK)
  } catch {
    return false
  }
  const tmp = tempName(dest)
  try {
    const st = fs.fstatSync(fd)
    if (!st.isFile()) return false
    if (st.size > max) throw new Error(`the archive is ${st.size} bytes, over the cap of ${max}`)
    const out = fs.openSync(tmp, 'w', 0o600)
    try {
      const buf = Buffer.allocUnsafe(1024 * 1024)
      let total = 0
      for (;;) {
        const n = fs.readSync(fd, buf, 0, buf.length, null)
        if (n === 0) break
        total += n
        if (total > max) throw new Error(`the archive grew over the cap of ${max} bytes`)
        fs.writeSync(out, buf, 0, n)
      }
      fs.fsyncSync(out)
    } finally {
      fs.closeSync(out)
    }
    fs.renameSync(tmp, dest)
    return true
  } catch (err) {
    fs.rmSync(tmp, { force: true })
    throw err
  } finally {
    fs.closeSync(fd)
  }
}

/** A temporary name beside `file`, this process's own: the reaper may be copying at the same time. */
const tempName = (file: string) => `${path.dirname(file)}/.${path.basename(file)}.${process.pid}.tmp`

/** Writes `file` through a temporary name; with replace: false, only if it does not exist yet (link, not rename). */
function writeAtomic(file: string, data: string, { replace = true } = {}): void {
  const tmp = tempName(file)
  try {
    fs.writeFileSync(tmp, data, { mode: 0o600 })
    if (replace) fs.renameSync(tmp, file)
    else fs.linkSync(tmp, file)
  } catch {
    // EEXIST without replace: what is there stays.
  } finally {
    fs.rmSync(tmp, { force: true })
  }
}

/** What was kept of sandbox `id` in `to`, read back and checked (the manifest is the sandbox's word); null if nothing was collected. */
export function readArtifactsRecord(to: string, id: string): ArtifactsRecord | null {
  const m = readBoundedJson(path.join(to, `${id}.json`), MANIFEST_MAX) as Record<string, unknown> | null
  if (!m || typeof m !== 'object') return null
  const tar = path.join(to, `${id}.tar`)
  return {
    tar: fs.existsSync(tar) ? tar : '',
    files: Array.isArray(m.files) ? m.files.filter((f): f is string => typeof f === 'string').slice(0, 100_000) : [],
    bytes: typeof m.bytes === 'number' && Number.isSafeInteger(m.bytes) ? m.bytes : 0,
    truncated: m.truncated === true,
    error: typeof m.error === 'string' && /^S\d{3}$/.test(m.error) ? m.error : null,
    message: typeof m.message === 'string' ? m.message.slice(0, 1024) : null,
  }
}
