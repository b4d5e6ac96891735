/** Shared pieces of the image tests. */
import { spawn, spawnSync } from 'node:child_process'
import fs from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { ImageStore } from '../../lib/images/index.js'
import type { ImageRecipe, ProgressEvent } from '../../lib/images/index.js'

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..')

/**
 * Presets are built once into a cache shared by all test files and kept across runs, so only
 * the first run pays for the builds. Tests that break things use their own cache (tempCacheDir).
 */
export const SHARED_CACHE = process.env.KRUNBOX_TEST_IMAGE_CACHE ?? path.join(os.tmpdir(), 'krunbox-test-images')

export function sharedStore(): ImageStore {
  return new ImageStore({ cacheDir: SHARED_CACHE })
}

export async function tempDir(prefix: string): Promise<string> {
  return fs.mkdtemp(path.join(os.tmpdir(), `krunbox-${prefix}-`))
}

export interface RunResult {
  status: number | null
  stdout: string
  stderr: string
}

/** Runs argv with `rootfs` as / under bubblewrap, the way the brief's acceptance check does. */
export function runInImage(rootfs: string, argv: string[]): RunResult {
  const result = spawnSync(
    'bwrap',
    [
      '--unshare-all',
      '--die-with-parent',
      '--ro-bind',
      rootfs,
      '/',
      '--proc',
      '/proc',
      '--dev',
      '/dev',
      '--tmpfs',
      '/tmp',
      ...argv,
    ],
    { encoding: 'utf8', timeout: 60_000 },
  )
  return { status: result.status, stdout: result.stdout, stderr: result.stderr }
}

export interface ChildBuild {
  child: import('node:child_process').ChildProcess
  events: ProgressEvent[]
  /** Resolves with the child's final result line (or null) and exit code. */
  done: Promise<{
    code: number | null
    signal: NodeJS.Signals | null
    result: { id: string; built: boolean } | null
    stderr: string
  }>
  /** Resolves at the first progress event matching the predicate. */
  waitFor(predicate: (e: ProgressEvent) => boolean): Promise<ProgressEvent>
}

/** Builds an image (or registers a recipe) in a separate node process (test/images/build-child.ts). */
export function buildInChild(cacheDir: string, name: string, recipe?: ImageRecipe): ChildBuild {
  const recipeArg = recipe === undefined ? [] : [JSON.stringify(recipe)]
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', path.join(repoRoot, 'test/images/build-child.ts'), cacheDir, name, ...recipeArg],
    {
      cwd: repoRoot,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  )
  const events: ProgressEvent[] = []
  const waiters: Array<{ predicate: (e: ProgressEvent) => boolean; resolve: (e: ProgressEvent) => void }> = []
  let result: { id: string; built: boolean } | null = null
  let stderr = ''
  let partial = ''
  child.stdout.on('data', (chunk: Buffer) => {
    const lines = (partial + chunk.toString('utf8')).split('\n')
    partial = lines.pop() ?? ''
    for (const line of lines) {
      const message = JSON.parse(line) as { progress?: ProgressEvent; result?: { id: string; built: boolean } }
      if (message.progress) {
        events.push(message.progress)
        for (const waiter of waiters.filter((w) => w.predicate(message.progress as ProgressEvent))) {
          waiters.splice(waiters.indexOf(waiter), 1)
          waiter.resolve(message.progress)
        }
      }
      if (message.result) result = message.result
    }
  })
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString('utf8')
  })
  const done = new Promise<{
    code: number | null
    signal: NodeJS.Signals | null
    result: { id: string; built: boolean } | null
    stderr: string
  }>((resolve) => {
    child.on('close', (code, signal) => resolve({ code, signal, result, stderr }))
  })
  return {
    child,
    events,
    done,
    waitFor: (predicate) =>
      new Promise((resolve, reject) => {
        const seen = events.find(predicate)
        if (seen) return resolve(seen)
        waiters.push({ predicate, resolve })
        void done.then(() => reject(new Error(`child exited before the awaited progress event; stderr:\n${stderr}`)))
      }),
  }
}

/** Entries of a cache root, grouped the way the tests look at them. */
export async function cacheEntries(cacheDir: string): Promise<{ images: string[]; tmp: string[]; trash: string[] }> {
  const entries = await fs.readdir(cacheDir).catch(() => [] as string[])
  return {
    images: entries.filter((e) => /^[0-9a-f]{64}$/.test(e)),
    tmp: entries.filter((e) => e.startsWith('.tmp-')),
    trash: entries.filter((e) => e.startsWith('.trash-')),
  }
}

export function isMonotonic(events: ProgressEvent[]): boolean {
  return events.every((e, i) => i === 0 || e.percent >= events[i - 1].percent)
}
