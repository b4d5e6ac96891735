/**
 * Runs the layer extractor (extract-worker.ts) in a worker thread, so unpacking an image
 * never blocks the host's event loop. The worker is started from the function's source text:
 * the same code runs from the TypeScript sources and from the bundle, with no extra file.
 */
import { createRequire } from 'node:module'
import { Worker } from 'node:worker_threads'
import { extractLayersInWorker, summarizeTreeInWorker, type ExtractInput, type ExtractResult, type TreeSummaryResult } from './extract-worker.js'

export type { ExtractLayer, ExtractResult } from './extract-worker.js'

export const DEFAULT_MAX_UNPACKED_BYTES = 32 * 1024 ** 3
export const DEFAULT_MAX_ENTRIES = 2_000_000

const requireHere = createRequire(import.meta.url)

export function extractLayers(input: Omit<ExtractInput, 'tarStreamPath'>, onLayer?: (index: number) => void): Promise<ExtractResult> {
  const full: ExtractInput = { ...input, tarStreamPath: requireHere.resolve('tar-stream') }
  return inWorker(`run(require, workerData, (m) => parentPort.postMessage(m))`, extractLayersInWorker, full, onLayer)
}

/** digest.ts's tree summary of a directory, computed in a worker. */
export function summarizeTreeOffLoop(root: string): Promise<TreeSummaryResult> {
  return inWorker(`Promise.resolve().then(() => run(require, workerData))`, summarizeTreeInWorker, root)
}

function inWorker<T>(call: string, fn: (...args: never[]) => unknown, workerData: unknown, onLayer?: (index: number) => void): Promise<T> {
  // Runs as CommonJS or as a module (eval workers follow the parent's --input-type): the
  // dynamic import and createRequire work in both.
  const source = `
(async () => {
  const { createRequire } = await import('node:module');
  const require = createRequire(${JSON.stringify(import.meta.url)});
  const { parentPort, workerData } = require('node:worker_threads');
  // Transpilers that keep function names (tsx, vitest) wrap them in __name(): the identity here.
  const __name = (f) => f;
  const run = ${fn.toString()};
  ${call}.then(
    (result) => parentPort.postMessage({ type: 'done', result }),
    (err) => parentPort.postMessage({ type: 'error', message: String(err && err.message || err) }),
  );
})();`
  return new Promise((resolve, reject) => {
    const worker = new Worker(source, { eval: true, workerData })
    let settled = false
    worker.on('message', (msg: { type: string; index?: number; result?: T; message?: string }) => {
      if (msg.type === 'layer') onLayer?.(msg.index as number)
      else if (msg.type === 'done') {
        settled = true
        resolve(msg.result as T)
      } else if (msg.type === 'error') {
        settled = true
        reject(new Error(msg.message))
      }
    })
    worker.on('error', (err) => {
      if (!settled) reject(err)
      settled = true
    })
    worker.on('exit', (code) => {
      if (!settled) reject(new Error(`the extractor stopped (exit ${code})`))
      settled = true
    })
  })
}
