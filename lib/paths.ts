/** Where the package's built parts and the user's caches and state live. */
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import fs from 'node:fs'
import { errors } from './protocol/errors.gen.js'

/** The package root, whether running from lib/ (sources) or dist/ (built). */
export const packageRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')

/** Go's name for Node's architectures the package ships an agent for. */
const AGENT_ARCHES: Record<string, string> = { x64: 'amd64', arm64: 'arm64' }

/**
 * The agent binary: $KRUNBOX_AGENT_PATH, else one built from this checkout (agent/build.sh),
 * else the one the package ships for this architecture (scripts/prebuild.sh builds both).
 */
export function agentBinaryPath(): string {
  const chosen = process.env.KRUNBOX_AGENT_PATH
  if (chosen !== undefined) {
    if (!fs.existsSync(chosen))
      throw errors.binaryMissing({ subject: `KRUNBOX_AGENT_PATH=${JSON.stringify(chosen)}`, problem: 'does not exist' })
    return chosen
  }
  const local = path.join(packageRoot, 'agent', 'dist', 'krunbox-agent')
  if (fs.existsSync(local)) return local
  const goarch = AGENT_ARCHES[process.arch]
  const shipped =
    goarch === undefined ? null : path.join(packageRoot, 'agent', 'dist', `linux-${goarch}`, 'krunbox-agent')
  if (shipped !== null && fs.existsSync(shipped)) return shipped
  throw errors.binaryMissing({
    subject: `the krunbox agent for ${process.platform}-${process.arch}`,
    problem:
      `is missing (looked for ${shipped ?? local}; the package ships linux-x64 and linux-arm64). ` +
      `Fix: build it from the krunbox sources with Go (CGO_ENABLED=0 go build in agent/) and set KRUNBOX_AGENT_PATH to the binary`,
  })
}

/**
 * The bubblewrap the namespace driver runs: $KRUNBOX_BWRAP if set, else `bwrap` on PATH (the
 * distribution's security-maintained binary). Null when there is none.
 */
export function bubblewrapPath(env: NodeJS.ProcessEnv = process.env): string | null {
  const chosen = env.KRUNBOX_BWRAP
  if (chosen !== undefined) {
    if (!path.isAbsolute(chosen) || !isExecutable(chosen)) {
      throw errors.namespaceUnavailable({
        subject: `KRUNBOX_BWRAP=${JSON.stringify(chosen)}`,
        problem: 'is not an absolute path to an executable',
      })
    }
    return chosen
  }
  if (foundBwrap !== null && foundBwrap.searchPath === env.PATH && isExecutable(foundBwrap.file)) return foundBwrap.file
  const file = findExecutable('bwrap', env.PATH)
  foundBwrap = file === null ? null : { searchPath: env.PATH, file }
  return file
}

/**
 * The bwrap the last lookup found, kept while PATH is the same and it is still there: every
 * create asks, and a scan of PATH threw and caught an error per directory without it.
 */
let foundBwrap: { searchPath: string | undefined; file: string } | null = null

/** The first executable `name` in the directories of PATH. */
export function findExecutable(
  name: string,
  searchPath = process.env.PATH ?? '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
): string | null {
  for (const dir of searchPath.split(':')) {
    if (dir === '') continue
    const candidate = path.join(dir, name)
    if (isExecutable(candidate)) return candidate
  }
  return null
}

function isExecutable(file: string): boolean {
  try {
    // stat first: a missing candidate (most of PATH) answers without an exception.
    if (!fs.statSync(file, { throwIfNoEntry: false })?.isFile()) return false
    fs.accessSync(file, fs.constants.X_OK)
    return true
  } catch {
    return false
  }
}

export function cacheDir(): string {
  return path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache'), 'krunbox')
}

export function defaultStateDir(): string {
  return path.join(process.env.XDG_STATE_HOME || path.join(os.homedir(), '.local', 'state'), 'krunbox', 'sandboxes')
}
