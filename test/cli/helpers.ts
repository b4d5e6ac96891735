/**
 * Runs the built CLI (dist/cli.js) as a user would, with a private state and config directory
 * per test file. dist is rebuilt (under a lock, test files run in parallel) when lib/ is newer.
 */
import { execFileSync, spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..')
export const CLI = path.join(repoRoot, 'dist', 'cli.js')
export const UUID_LINE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\n$/

function newestMtime(p: string): number {
  const st = fs.statSync(p)
  if (!st.isDirectory()) return st.mtimeMs
  let newest = st.mtimeMs
  for (const name of fs.readdirSync(p)) newest = Math.max(newest, newestMtime(path.join(p, name)))
  return newest
}

function cliIsFresh(): boolean {
  const built = fs.statSync(CLI, { throwIfNoEntry: false })?.mtimeMs ?? 0
  const sources = Math.max(newestMtime(path.join(repoRoot, 'lib')), newestMtime(path.join(repoRoot, 'tsup.config.ts')))
  return built > sources
}

/** Builds dist/ once if it is older than the sources; other test files wait on the lock. */
export async function ensureCliBuilt(): Promise<void> {
  const lock = path.join(os.tmpdir(), 'krunbox-cli-test-build.lock')
  const deadline = Date.now() + 120_000
  for (;;) {
    try {
      fs.mkdirSync(lock)
      break
    } catch {
      const age = Date.now() - (fs.statSync(lock, { throwIfNoEntry: false })?.mtimeMs ?? Date.now())
      if (age > 60_000) fs.rmSync(lock, { recursive: true, force: true }) // left by a killed run
      if (Date.now() > deadline) throw new Error('timed out waiting for another test file to build dist/')
      await new Promise((r) => setTimeout(r, 100))
    }
  }
  try {
    if (!cliIsFresh()) execFileSync('npx', ['tsup', '--silent'], { cwd: repoRoot, stdio: 'ignore', timeout: 90_000 })
  } finally {
    fs.rmSync(lock, { recursive: true, force: true })
  }
}

export interface CliEnv {
  /** XDG_STATE_HOME / XDG_CONFIG_HOME of this test file. */
  home: string
  env: NodeJS.ProcessEnv
}

export function privateCliEnv(extra: NodeJS.ProcessEnv = {}): CliEnv {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-cli-'))
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    XDG_STATE_HOME: path.join(home, 'state'),
    XDG_CONFIG_HOME: path.join(home, 'config'),
    ...extra,
  }
  delete env.KRUNBOX_TOKEN
  return { home, env }
}

export interface CliResult {
  code: number | null
  signal: NodeJS.Signals | null
  stdout: string
  stderr: string
  stdoutBytes: Buffer
  ms: number
}

export interface CliOptions {
  env: NodeJS.ProcessEnv
  /** Piped to stdin; without it stdin is /dev/null. */
  input?: string | Buffer
  timeoutMs?: number
  /** Called with the child right after spawn (to signal it, watch its output). */
  onSpawn?: (child: import('node:child_process').ChildProcess) => void
}

/** `node dist/cli.js ...args`; `sh -c script` when args is a string (for pipelines, with $CLI set). */
export function krunbox(args: string[] | string, options: CliOptions): Promise<CliResult> {
  const [file, argv] = typeof args === 'string' ? ['sh', ['-c', args]] : [process.execPath, [CLI, ...args]]
  const started = performance.now()
  const child = spawn(file, argv, {
    env: { ...options.env, CLI: `${process.execPath} ${CLI}` },
    stdio: [options.input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'],
  })
  options.onSpawn?.(child)
  if (options.input !== undefined) child.stdin!.end(options.input)
  const out: Buffer[] = []
  const err: Buffer[] = []
  child.stdout!.on('data', (d: Buffer) => out.push(d))
  child.stderr!.on('data', (d: Buffer) => err.push(d))
  const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 30_000)
  return new Promise((resolve, reject) => {
    child.on('error', reject)
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      const stdoutBytes = Buffer.concat(out)
      resolve({
        code,
        signal,
        stdout: stdoutBytes.toString('utf8'),
        stderr: Buffer.concat(err).toString('utf8'),
        stdoutBytes,
        ms: performance.now() - started,
      })
    })
  })
}

/** Stops every live sandbox of this private state directory (test clean-up). */
export async function stopAll(env: NodeJS.ProcessEnv): Promise<void> {
  const listing = await krunbox(['list'], { env })
  for (const id of listing.stdout
    .split('\n')
    .slice(1)
    .map((l) => l.split('\t')[0])
    .filter(Boolean))
    await krunbox(['stop', id], { env })
}
