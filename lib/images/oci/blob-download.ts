/**
 * Blob downloads in a worker thread. A pull's bytes (and the garbage a fetch body makes, tens
 * of MB per pull) stay on the worker's own heap: collected on the main thread, they blocked the
 * host's event loop for 20–37 ms per pull. The worker runs blob-transfer.ts's functions from
 * their source, as the extractor does, so the same code runs from TypeScript and the bundle.
 * It holds no credentials of its own: each job carries the Authorization header, and the
 * retry, re-authentication and error rules stay with the caller (registry.ts).
 */
import { Worker } from 'node:worker_threads'
import {
  fetchBlobToStore,
  followRedirects,
  storeVerified,
  type BlobAnswer,
  type BlobEvents,
  type BlobJob,
} from './blob-transfer.js'

/** What the worker reported a job failed with: its kind (blob-transfer.ts), else a system code. */
export interface BlobJobError extends Error {
  kind?: 'digest' | 'network' | 'http'
  status?: number | null
  code?: string
}

interface Pending {
  events: BlobEvents
  resolve: (answer: BlobAnswer) => void
  reject: (err: BlobJobError) => void
}

// Jobs come as { id, job } and { id, abort: true }; answers go back as { id, request | bytes | answer | error }.
const WORKER_SOURCE = `
(async () => {
  const { createRequire } = await import('node:module');
  const require = createRequire(${JSON.stringify(import.meta.url)});
  const { parentPort } = require('node:worker_threads');
  // Transpilers that keep function names (tsx, vitest) wrap them in __name(): the identity here.
  const __name = (f) => f;
  const steps = { followRedirects: ${followRedirects.toString()}, storeVerified: ${storeVerified.toString()} };
  const run = ${fetchBlobToStore.toString()};
  const aborts = new Map();
  parentPort.on('message', ({ id, job, abort }) => {
    if (abort) return aborts.get(id)?.abort();
    const controller = new AbortController();
    aborts.set(id, controller);
    const events = { onRequest: (url) => parentPort.postMessage({ id, request: url }), onBytes: (bytes) => parentPort.postMessage({ id, bytes }) };
    run(require, job, controller.signal, events, steps).then(
      (answer) => parentPort.postMessage({ id, answer }),
      (err) => parentPort.postMessage({ id, error: { message: String((err && err.message) || err), kind: err && err.kind, status: err && err.status, code: err && typeof err.code === 'string' ? err.code : undefined } }),
    ).finally(() => aborts.delete(id));
  });
})();`

/** One worker per pull, started with its first job; close() ends it. */
export class BlobDownloader {
  #worker: Worker | null = null
  #pending = new Map<number, Pending>()
  #nextId = 1

  /** Runs one job; `signal` stops it (the pull no longer needs the blob). */
  run(job: BlobJob, events: BlobEvents, signal?: AbortSignal): Promise<BlobAnswer> {
    const worker = this.#start()
    const id = this.#nextId++
    return new Promise<BlobAnswer>((resolve, reject) => {
      if (signal?.aborted) return reject(Object.assign(new Error('the download was stopped'), { kind: 'network' }))
      const onAbort = () => worker.postMessage({ id, abort: true })
      signal?.addEventListener('abort', onAbort, { once: true })
      const settle = () => signal?.removeEventListener('abort', onAbort)
      this.#pending.set(id, {
        events,
        resolve: (answer) => (settle(), resolve(answer)),
        reject: (err) => (settle(), reject(err)),
      })
      worker.postMessage({ id, job })
    })
  }

  /** Starts the worker ahead of its first job (it takes ~50 ms to load its fetch). */
  warm(): void {
    this.#start()
  }

  close(): void {
    void this.#worker?.terminate()
    this.#worker = null
    this.#failAll('the download worker was closed')
  }

  #start(): Worker {
    if (this.#worker !== null) return this.#worker
    const worker = new Worker(WORKER_SOURCE, { eval: true })
    worker.on(
      'message',
      (msg: { id: number; request?: string; bytes?: number; answer?: BlobAnswer; error?: BlobJobError }) => {
        const pending = this.#pending.get(msg.id)
        if (pending === undefined) return
        if (msg.request !== undefined) pending.events.onRequest(msg.request)
        else if (msg.bytes !== undefined) pending.events.onBytes(msg.bytes)
        else {
          this.#pending.delete(msg.id)
          if (msg.answer !== undefined) pending.resolve(msg.answer)
          else pending.reject(Object.assign(new Error(msg.error?.message), msg.error))
        }
      },
    )
    // The worker itself failed (out of memory, say): the host's trouble, worth another try.
    worker.on('error', (err) => this.#failAll(`the download worker failed: ${err.message}`))
    worker.on('exit', (code) => {
      if (this.#worker === worker) this.#worker = null
      this.#failAll(`the download worker stopped (exit ${code})`)
    })
    this.#worker = worker
    return worker
  }

  #failAll(message: string): void {
    for (const pending of this.#pending.values())
      pending.reject(Object.assign(new Error(message), { kind: 'network' as const }))
    this.#pending.clear()
  }
}
