/**
 * Runs the layer extractor (extract-worker.ts) in a worker thread, so unpacking an image
 * never blocks the host's event loop. The worker is started from the function's source text:
 * the same code runs from the TypeScript sources and from the bundle, with no extra file.
 */
import { createRequire } from 'node:module'
import { Worker } from 'node:worker_threads'
import type { SubordinateMapping } from '../../drivers/subids.js'
import { describe } from '../../options.js'
import { isAllZero } from '../../sparse.js'
import { fileHashTable } from './file-hashes.js'
import { spawnMapped } from './userns.js'
import {
  extractLayersInWorker,
  summarizeTreeInWorker,
  type ExtractInput,
  type ExtractLayer,
  type ExtractResult,
  type TreeSummaryResult,
} from './extract-worker.js'

export type { ExtractLayer, ExtractResult } from './extract-worker.js'

export const DEFAULT_MAX_UNPACKED_BYTES = 32 * 1024 ** 3
export const DEFAULT_MAX_ENTRIES = 2_000_000
/**
 * A bomb is refused once the layers have expanded past 1 GiB to more than 1024 times the
 * compressed bytes read: gzip itself cannot go past about 1032:1, and real layers stay far below
 * (a 101 KB zstd layer of zeros, 3.2 GB unpacked, stops at 1 GiB instead of writing it all).
 */
export const DEFAULT_EXPANSION = { ratio: 1024, afterBytes: 1024 ** 3 }

const requireHere = createRequire(import.meta.url)

/** System errors that may pass on a later try: the disk or the process's limits, not the image. */
const TRANSIENT_CODES = new Set(['ENOSPC', 'EDQUOT', 'EMFILE', 'ENFILE', 'ENOMEM', 'EIO', 'EAGAIN', 'EBUSY', 'EINTR'])

/**
 * An unpack that failed. The layers are verified blobs, so what they say fails the same way
 * every time (a refused entry, a bound, a diff_id, bad compression or tar): only the host's
 * resources (a full disk, too many open files, a worker that died) are worth another try.
 */
export class UnpackError extends Error {
  constructor(
    message: string,
    readonly transient: boolean,
    readonly code: string | null = null,
  ) {
    super(message)
  }
}

export function asUnpackError(err: unknown): UnpackError {
  if (err instanceof UnpackError) return err
  const code = typeof (err as { code?: unknown })?.code === 'string' ? (err as { code: string }).code : null
  return new UnpackError((err as Error)?.message ?? String(err), code !== null && TRANSIENT_CODES.has(code), code)
}

/** A layer that could not be handed to the extractor (its download failed): the cause is the download's, not the unpack's. */
export class LayerSourceError extends Error {
  constructor(readonly reason: unknown) {
    super((reason as Error)?.message ?? String(reason))
  }
}

/** What an unpack wrote: the extractor's counts and the tree summary of the finished rootfs. */
export type ExtractedImage = Omit<ExtractResult, 'fileHashes'> & { tree: TreeSummaryResult }

/**
 * Applies `count` layers in order, each asked for through `nextLayer` when the one before is
 * done (a pull hands out a layer once it is downloaded and verified), then runs `finish` (what
 * the caller adds to the tree) and summarizes the tree in the same worker, from the hashes it
 * took while writing: they never cross to this thread (thousands of entries, cloned twice,
 * were most of a pull's longest event-loop stall).
 */
export function extractLayers(
  input: Omit<ExtractInput, 'tarStreamPath'>,
  nextLayer: (index: number) => Promise<ExtractLayer>,
  onLayer: (index: number) => void,
  finish: () => Promise<void>,
  mapping: SubordinateMapping | null = null,
): Promise<ExtractedImage> {
  const full: ExtractInput = { ...input, tarStreamPath: requireHere.resolve('tar-stream') }
  // The worker asks with { type: 'need', index } and waits for the answer on its port; index
  // `count` (past the last layer) is the caller's finishing step.
  const call = `(() => {
    const waiting = new Map();
    parentPort.on('message', (m) => { const w = waiting.get(m.index); waiting.delete(m.index); if (w) m.layer ? w.resolve(m.layer) : w.reject(new Error(m.message)); });
    const next = (index) => new Promise((resolve, reject) => { waiting.set(index, { resolve, reject }); parentPort.postMessage({ type: 'need', index }); });
    return run(require, workerData, (m) => parentPort.postMessage(m), next, { fileHashTable, isAllZero, describe }).then(async ({ fileHashes, ...counts }) => {
      await next(workerData.count);
      return { ...counts, tree: summarize(require, { root: workerData.rootfs, known: fileHashes }) };
    });
  })()`
  const nextStep = (index: number) =>
    index < input.count
      ? nextLayer(index)
      : finish().then(() => ({ file: '', diffId: '', compression: 'none' as const }))
  return inWorker(
    call,
    extractLayersInWorker,
    full,
    { onLayer, nextLayer: nextStep, mapping },
    { summarize: summarizeTreeInWorker, fileHashTable, isAllZero, describe },
  )
}

/** digest.ts's tree summary of a directory, computed in a worker (a child process in `mapping`'s user namespace). */
export function summarizeTreeOffLoop(
  root: string,
  mapping: SubordinateMapping | null = null,
): Promise<TreeSummaryResult> {
  return inWorker(
    `Promise.resolve().then(() => run(require, workerData))`,
    summarizeTreeInWorker,
    { root },
    { mapping },
  )
}

interface WorkerHooks {
  onLayer?: (index: number) => void
  nextLayer?: (index: number) => Promise<ExtractLayer>
  /** Run in a child process in this user namespace (a rootless unpack keeping owners) instead of a worker thread. */
  mapping?: SubordinateMapping | null
}

/** A worker thread, or a child process in a mapped user namespace, behind the same few calls. */
interface Runner {
  on(event: 'message', listener: (msg: any) => void): void
  on(event: 'error', listener: (err: Error) => void): void
  on(event: 'exit', listener: (code: number | null) => void): void
  postMessage(msg: unknown): void
  stop(): void
}

async function startRunner(source: string, workerData: unknown, mapping: SubordinateMapping | null): Promise<Runner> {
  if (mapping === null) {
    const worker = new Worker(source, { eval: true, workerData })
    return {
      on: (event: string, listener: (...args: any[]) => void) => worker.on(event, listener),
      postMessage: (m) => worker.postMessage(m),
      stop: () => void worker.terminate(),
    } as Runner
  }
  const child = await spawnMapped(
    mapping,
    process.execPath,
    ['-e', source, JSON.stringify(workerData)],
    ['pipe', 'ignore', 'ignore', 'ipc'],
  )
  return {
    on: (event: string, listener: (...args: any[]) => void) => child.on(event, listener),
    postMessage: (m) => child.connected && child.send(m as object),
    stop: () => child.kill('SIGKILL'),
  } as Runner
}

function inWorker<T>(
  call: string,
  fn: (...args: never[]) => unknown,
  workerData: unknown,
  hooks: WorkerHooks = {},
  helpers: Record<string, (...args: never[]) => unknown> = {},
): Promise<T> {
  // Runs as CommonJS or as a module (eval workers follow the parent's --input-type): the
  // dynamic import and createRequire work in both.
  const source = `
(async () => {
  const { createRequire } = await import('node:module');
  const require = createRequire(${JSON.stringify(import.meta.url)});
  const threads = require('node:worker_threads');
  // In a worker thread, its port; in a child process (a mapped user namespace), its IPC channel and argv.
  const parentPort = threads.parentPort ?? { postMessage: (m) => process.send(m), on: (e, f) => process.on(e, f) };
  const workerData = threads.parentPort ? threads.workerData : JSON.parse(process.argv[1]);
  // A child process whose host went away (SIGKILL) stops at once instead of unpacking for no one.
  if (!threads.parentPort) process.on('disconnect', () => process.exit(1));
  // Transpilers that keep function names (tsx, vitest) wrap them in __name(): the identity here.
  const __name = (f) => f;
  const run = ${fn.toString()};
  ${Object.entries(helpers)
    .map(([name, helper]) => `const ${name} = ${helper.toString()};`)
    .join('\n  ')}
  ${call}.then(
    (result) => parentPort.postMessage({ type: 'done', result }),
    // A message may name what a layer said (a path of megabytes): never more than 4 KiB of it.
    (err) => parentPort.postMessage({ type: 'error', message: String(err && err.message || err).slice(0, 4096), code: err && typeof err.code === 'string' ? err.code : null }),
  );
})();`
  return startRunner(source, workerData, hooks.mapping ?? null)
    .catch((err: Error) => {
      throw new UnpackError(`the extractor could not start in the subordinate ids' namespace: ${err.message}`, false)
    })
    .then(
      (worker) =>
        new Promise<T>((resolve, reject) => {
          let settled = false
          const finish = (settle: () => void) => {
            if (settled) return
            settled = true
            settle()
            // The worker listens on its port for layers: it does not end by itself.
            worker.stop()
          }
          worker.on(
            'message',
            (msg: { type: string; index?: number; result?: T; message?: string; code?: string | null }) => {
              if (msg.type === 'layer') hooks.onLayer?.(msg.index as number)
              else if (msg.type === 'need') {
                const index = msg.index as number
                ;(hooks.nextLayer as (index: number) => Promise<ExtractLayer>)(index).then(
                  (layer) => !settled && worker.postMessage({ index, layer }),
                  (err: unknown) => finish(() => reject(new LayerSourceError(err))),
                )
              } else if (msg.type === 'done') finish(() => resolve(msg.result as T))
              else if (msg.type === 'error')
                finish(() =>
                  reject(asUnpackError(Object.assign(new Error(msg.message), { code: msg.code ?? undefined }))),
                )
            },
          )
          worker.on('error', (err) => {
            // The worker itself failed (out of memory, say): the host's trouble, not the image's.
            if (!settled) reject(new UnpackError(`the extractor failed: ${err.message}`, true))
            settled = true
          })
          worker.on('exit', (code) => {
            if (!settled) reject(new UnpackError(`the extractor stopped (exit ${code})`, true))
            settled = true
          })
        }),
    )
}
