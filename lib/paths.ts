/** Where the package's built parts and the user's caches and state live. */
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import fs from 'node:fs'
import { SandboxError } from './errors.js'

/** The package root, whether running from lib/ (sources) or dist/ (built). */
export const packageRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')

export function agentBinaryPath(): string {
  const p = process.env.KRUNBOX_AGENT_PATH ?? path.join(packageRoot, 'agent', 'dist', 'krunbox-agent')
  if (!fs.existsSync(p)) throw new SandboxError('S303', `agent binary not found at ${p}; run the project setup (npm run setup)`)
  return p
}

export function cacheDir(): string {
  return path.join(process.env.XDG_CACHE_HOME || path.join(os.homedir(), '.cache'), 'krunbox')
}

export function defaultStateDir(): string {
  return path.join(process.env.XDG_STATE_HOME || path.join(os.homedir(), '.local', 'state'), 'krunbox', 'sandboxes')
}
