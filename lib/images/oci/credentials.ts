/**
 * Registry credentials the way Docker keeps them: `$DOCKER_CONFIG/config.json` (default
 * `~/.docker/config.json`) with `auths` (base64 user:password, or an identity token),
 * `credHelpers` (per registry) and `credsStore` (all registries), both run as
 * `docker-credential-<name> get` with the server address on stdin.
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { DOCKER_HUB } from './reference.js'

export interface Credentials {
  username: string
  password: string
}

interface DockerConfig {
  auths?: Record<string, { auth?: string; username?: string; password?: string; identitytoken?: string }>
  credHelpers?: Record<string, string>
  credsStore?: string
}

const HELPER_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/
const HELPER_TIMEOUT_MS = 15_000
const MAX_HELPER_OUTPUT = 64 * 1024

export function dockerConfigPath(env: NodeJS.ProcessEnv = process.env): string {
  const dir =
    env.DOCKER_CONFIG !== undefined && env.DOCKER_CONFIG !== ''
      ? env.DOCKER_CONFIG
      : path.join(env.HOME ?? os.homedir(), '.docker')
  return path.join(dir, 'config.json')
}

/** The keys a registry may be stored under: Docker writes Hub's as its old index URL. */
function keysFor(registry: string): string[] {
  if (registry === DOCKER_HUB)
    return ['https://index.docker.io/v1/', 'index.docker.io', DOCKER_HUB, 'registry-1.docker.io']
  return [registry]
}

/** `https://host:port/v1/` and `host:port` name the same registry. */
function normalizeKey(key: string): string {
  return key.replace(/^[a-z]+:\/\//, '').replace(/\/.*$/, '')
}

function lookup<T>(table: Record<string, T> | undefined, registry: string): T | undefined {
  if (table === undefined || typeof table !== 'object') return undefined
  const wanted = keysFor(registry)
  for (const key of wanted) if (Object.hasOwn(table, key)) return table[key]
  const normalized = new Set(wanted.map(normalizeKey))
  for (const [key, value] of Object.entries(table)) if (normalized.has(normalizeKey(key))) return value
  return undefined
}

/** Credentials for a registry, or null for anonymous access. Errors name the file or helper. */
export async function credentialsFor(
  registry: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<Credentials | null> {
  const file = dockerConfigPath(env)
  let text: string
  try {
    text = await fs.readFile(file, 'utf8')
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
    throw new Error(`cannot read ${file}: ${(err as NodeJS.ErrnoException).code}`, { cause: err })
  }
  let config: DockerConfig
  try {
    config = JSON.parse(text) as DockerConfig
  } catch {
    throw new Error(`${file} is not valid JSON`)
  }
  const helper = lookup(config.credHelpers, registry) ?? config.credsStore
  if (typeof helper === 'string' && helper !== '') {
    const fromHelper = await runHelper(helper, registry === DOCKER_HUB ? 'https://index.docker.io/v1/' : registry, env)
    if (fromHelper !== null) return fromHelper
  }
  const entry = lookup(config.auths, registry)
  if (entry === undefined || entry === null || typeof entry !== 'object') return null
  if (typeof entry.identitytoken === 'string' && entry.identitytoken !== '')
    return { username: '<token>', password: entry.identitytoken }
  if (typeof entry.username === 'string' && typeof entry.password === 'string')
    return { username: entry.username, password: entry.password }
  if (typeof entry.auth === 'string' && entry.auth !== '') {
    const decoded = Buffer.from(entry.auth, 'base64').toString('utf8')
    const colon = decoded.indexOf(':')
    if (colon <= 0) throw new Error(`${file}: auths entry for ${registry} is not base64 of user:password`)
    return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1) }
  }
  return null
}

/** Runs `docker-credential-<helper> get`; "credentials not found" means anonymous. */
function runHelper(helper: string, serverUrl: string, env: NodeJS.ProcessEnv): Promise<Credentials | null> {
  if (!HELPER_NAME.test(helper))
    return Promise.reject(new Error(`credential helper name ${JSON.stringify(helper)} is invalid`))
  const program = `docker-credential-${helper}`
  return new Promise((resolve, reject) => {
    const child = spawn(program, ['get'], { env, stdio: ['pipe', 'pipe', 'pipe'], timeout: HELPER_TIMEOUT_MS })
    const out: Buffer[] = []
    let size = 0
    child.stdout.on('data', (chunk: Buffer) => {
      size += chunk.length
      if (size <= MAX_HELPER_OUTPUT) out.push(chunk)
    })
    child.stderr.resume()
    child.on('error', (err: NodeJS.ErrnoException) =>
      reject(new Error(`${program}: ${err.code === 'ENOENT' ? 'not found on PATH' : err.message}`)),
    )
    child.on('close', (code, signal) => {
      const text = Buffer.concat(out).toString('utf8').trim()
      if (code !== 0) {
        if (/credentials not found/i.test(text)) return resolve(null)
        return reject(new Error(`${program} get failed (${signal ?? `exit ${code}`})`))
      }
      try {
        const parsed = JSON.parse(text) as { Username?: unknown; Secret?: unknown }
        if (typeof parsed.Username !== 'string' || typeof parsed.Secret !== 'string') throw new Error('fields missing')
        resolve({ username: parsed.Username, password: parsed.Secret })
      } catch {
        reject(new Error(`${program} get printed something other than {"Username","Secret"}`))
      }
    })
    child.stdin.on('error', () => undefined)
    child.stdin.end(serverUrl)
  })
}
