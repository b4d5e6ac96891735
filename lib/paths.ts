/** Where the package's built parts and the user's caches and state live. */
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import fs from 'node:fs'
import { SandboxError } from './errors.js'
import { warnOnce } from './warn.js'

/** The package root, whether running from lib/ (sources) or dist/ (built). */
export const packageRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')

export function agentBinaryPath(): string {
  const p = process.env.KRUNBOX_AGENT_PATH ?? path.join(packageRoot, 'agent', 'dist', 'krunbox-agent')
  if (!fs.existsSync(p)) throw new SandboxError('S303', `agent binary not found at ${p}; run the project setup (npm run setup)`)
  return p
}

/**
 * The bubblewrap the namespace driver runs: $KRUNBOX_BWRAP if set, else the static build the
 * set-up makes (bwrap/build.sh; 0.16 MiB RSS per sandbox against 1.9 MiB for the
 * dynamically linked Debian binary) while it matches the installed package, else `bwrap` on
 * PATH. Null when there is none.
 */
export function bubblewrapPath(env: NodeJS.ProcessEnv = process.env, root = packageRoot): string | null {
  const chosen = env.KRUNBOX_BWRAP
  if (chosen !== undefined) {
    if (!path.isAbsolute(chosen) || !isExecutable(chosen)) {
      throw new SandboxError('S302', `KRUNBOX_BWRAP=${JSON.stringify(chosen)} is not an absolute path to an executable`)
    }
    return chosen
  }
  const dist = path.join(root, 'bwrap', 'dist')
  const built = path.join(dist, 'bwrap')
  if (isExecutable(built)) {
    if (builtForInstalledBubblewrap(dist)) return built
    warnOnce('bwrap_stale', `krunbox: ${built} was built for a bubblewrap package that has since changed; using the bwrap on PATH until the set-up (npm run setup) rebuilds it`)
  }
  return findExecutable('bwrap', env.PATH)
}

/**
 * Whether the Debian bwrap the static build stands in for is still the file it was built
 * against (size:mtime, as bwrap/build.sh records it). A package update changes them; until
 * the set-up rebuilds, the updated system binary is the one to run.
 */
function builtForInstalledBubblewrap(dist: string): boolean {
  try {
    const [file, identity] = fs.readFileSync(path.join(dist, 'system-bwrap'), 'utf8').split('\n')
    const s = fs.statSync(file, { bigint: true })
    return identity === `${s.size}:${s.mtimeNs / 1_000_000_000n}`
  } catch {
    return false
  }
}

/** The first executable `name` in the directories of PATH. */
export function findExecutable(name: string, searchPath = process.env.PATH ?? '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'): string | null {
  for (const dir of searchPath.split(':')) {
    if (dir === '') continue
    const candidate = path.join(dir, name)
    if (isExecutable(candidate)) return candidate
  }
  return null
}

function isExecutable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK)
    return fs.statSync(file).isFile()
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
