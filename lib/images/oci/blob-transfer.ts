/**
 * The two halves of a blob download that must hold the same rules wherever they run: following
 * redirects without handing credentials to another origin, and storing bytes only once they
 * hash to their digest. Both run on the main thread (manifests; imports) and in the download
 * worker (blob-download.ts starts it from these functions' source), so each stays
 * self-contained: what it needs comes through its arguments, nothing through an import.
 */

/** A failure a caller classifies by kind: `digest` (the content is wrong as served), `network` (worth a retry), `http` (an answer, see status). */
export interface TransferFailure extends Error {
  kind: 'digest' | 'network'
  code?: string
}

export interface FollowInput {
  url: string
  accept: string | null
  /** Sent only to this origin (scheme, host and port). */
  authorization: string | null
  origin: string
  maxRedirects: number
  /** Deadline for each answer's headers; a body is bounded by stalls instead. */
  headerTimeoutMs: number
  /** Aborts the request and, once answered, its body. */
  signal?: AbortSignal
  onRequest?: (url: string) => void
}

/**
 * GET `url`, following redirects by hand: only http(s), at most `maxRedirects`, and the
 * Authorization header only where the target's origin is the registry's. Answers the first
 * response that is not a redirect, its body unread.
 */
export async function followRedirects(input: FollowInput): Promise<Response> {
  const fail = (message: string, kind: 'network' | 'http', status: number | null = null) =>
    Object.assign(new Error(message), { kind, status })
  // A redirect's target is the registry's word: named capped.
  const named = (url: string) => (url.length > 200 ? JSON.stringify(`${url.slice(0, 200)}…`) : url)
  let current = input.url
  for (let hop = 0; hop <= input.maxRedirects; hop += 1) {
    const target = new URL(current)
    if (target.protocol !== 'https:' && target.protocol !== 'http:')
      throw fail(`redirect to ${named(target.protocol)} refused`, 'http')
    const headers: Record<string, string> = {}
    if (input.accept !== null) headers.accept = input.accept
    if (input.authorization !== null && target.origin === input.origin) headers.authorization = input.authorization
    input.onRequest?.(current)
    // The deadline ends with the headers; the caller's signal also ends the body.
    const controller = new AbortController()
    let timedOut = false
    const timer = setTimeout(() => {
      timedOut = true
      controller.abort()
    }, input.headerTimeoutMs)
    const { signal } = input
    if (signal !== undefined) {
      if (signal.aborted) controller.abort()
      else signal.addEventListener('abort', () => controller.abort(), { once: true })
    }
    let res: Response
    try {
      res = await fetch(current, { headers, redirect: 'manual', signal: controller.signal })
    } catch (err) {
      const cause = timedOut
        ? `no answer within ${input.headerTimeoutMs} ms`
        : ((err as { cause?: { code?: string } }).cause?.code ?? (err as Error).message)
      throw fail(`cannot reach ${named(target.origin)}: ${cause}`, 'network')
    } finally {
      clearTimeout(timer)
    }
    if (res.status < 300 || res.status >= 400 || res.status === 304) return res
    const location = res.headers.get('location')
    await res.body?.cancel()
    if (location === null) throw fail(`${named(current)}: redirect without a Location`, 'http', res.status)
    current = new URL(location, current).toString()
  }
  throw fail(`${input.url}: more than ${input.maxRedirects} redirects`, 'http')
}

export interface StoreInput {
  /** The store's directory: the temporary file is made there, beside `final`. */
  dir: string
  final: string
  digest: string
  /** The declared size, which is also the bound; null: `limit` bounds it. */
  size: number | null
  limit: number
  /** Temporary files are named `.ingest-<pid>-…` so that a sweep finds a dead process's. */
  pid: number
}

/**
 * Writes what `source` yields to a private temporary file while hashing and counting it, and
 * renames it to `final` only when size and sha256 match: a tampered or truncated blob is never
 * stored. A `digest` failure says the content is wrong; anything else is the disk's or the source's.
 */
export async function storeVerified(
  req: (id: string) => unknown,
  input: StoreInput,
  source: AsyncIterable<Uint8Array>,
  onBytes?: (bytes: number) => void,
): Promise<string> {
  // Types only (erased): the modules themselves come through req.
  const fsp = req('node:fs/promises') as typeof import('node:fs/promises')
  const crypto = req('node:crypto') as typeof import('node:crypto')
  const path = req('node:path') as typeof import('node:path')
  const wrong = (message: string) => Object.assign(new Error(message), { kind: 'digest' })
  // Chunks are written a few hundred KB at a time: one write per network chunk (~64 KB) was
  // most of the work, and the garbage, of a download.
  const BATCH_BYTES = 512 * 1024
  await fsp.mkdir(path.dirname(input.final), { recursive: true })
  const tmp = path.join(input.dir, `.ingest-${input.pid}-${crypto.randomBytes(6).toString('hex')}`)
  const limit = input.size ?? input.limit
  const hash = crypto.createHash('sha256')
  const handle = await fsp.open(tmp, 'wx', 0o644)
  let bytes = 0
  let pending: Uint8Array[] = []
  const flush = async () => {
    let rest = pending
    pending = []
    while (rest.length > 0) {
      let written = (await handle.writev(rest)).bytesWritten
      // A short writev: what it left, as views.
      const left: Uint8Array[] = []
      for (const b of rest) {
        if (written >= b.length) written -= b.length
        else {
          left.push(written === 0 ? b : b.subarray(written))
          written = 0
        }
      }
      rest = left
    }
  }
  try {
    let pendingBytes = 0
    for await (const chunk of source) {
      bytes += chunk.length
      if (bytes > limit)
        throw wrong(
          `blob ${input.digest} is larger than ${input.size === null ? `the limit of ${input.limit} bytes` : `its declared ${input.size} bytes`}`,
        )
      hash.update(chunk)
      pending.push(chunk)
      pendingBytes += chunk.length
      if (pendingBytes >= BATCH_BYTES) {
        pendingBytes = 0
        await flush()
      }
      onBytes?.(bytes)
    }
    await flush()
    if (input.size !== null && bytes !== input.size)
      throw wrong(`blob ${input.digest} is ${bytes} bytes, not its declared ${input.size}`)
    const actual = `sha256:${hash.digest('hex')}`
    if (actual !== input.digest) throw wrong(`blob ${input.digest} does not match its content (got ${actual})`)
    await handle.sync()
    await handle.close()
    await fsp.rename(tmp, input.final)
    return input.final
  } catch (err) {
    await handle.close().catch(() => undefined)
    await fsp.rm(tmp, { force: true })
    throw err
  }
}

export interface BlobJob {
  follow: Omit<FollowInput, 'signal' | 'onRequest'>
  store: StoreInput
  /** A body that brings fewer than windowBytes in a window of windowMs fails (retryable): a silence or a trickle. */
  windowMs: number
  windowBytes: number
  /** Set for a small blob: the answer and its whole body within this, or it fails (retryable). */
  totalMs: number | null
}

/** A blob stored, or the answer that was not a 2xx (its body discarded) for the caller's retry rules. */
export type BlobAnswer =
  { stored: string } | { status: number; retryAfter: string | null; wwwAuthenticate: string | null }

export interface BlobEvents {
  onRequest: (url: string) => void
  /** About every 1 % of the blob (at least 256 KiB) and at its end. */
  onBytes: (bytes: number) => void
}

/**
 * One blob from the registry into the store (the download worker's job): followRedirects,
 * then the body through storeVerified. Read from the response's own reader, each chunk a view
 * of its bytes: a Readable around it would copy buffered chunks into fresh buffers. Past a
 * deadline (the window's floor, a small blob's total) the request is aborted: its socket goes.
 */
export async function fetchBlobToStore(
  req: (id: string) => unknown,
  job: BlobJob,
  signal: AbortSignal,
  events: BlobEvents,
  steps: { followRedirects: typeof followRedirects; storeVerified: typeof storeVerified },
): Promise<BlobAnswer> {
  const what = `blob ${job.store.digest} from ${job.follow.url}`
  // Set when a deadline passed: whatever the pending read or fetch then answers, this is the error.
  let late: Error | null = null
  const controller = new AbortController()
  const stopped = () => controller.abort()
  signal.addEventListener('abort', stopped, { once: true })
  if (signal.aborted) stopped()
  const expire = (message: string) => {
    late ??= Object.assign(new Error(`${what}: ${message}`), { kind: 'network' })
    controller.abort()
  }
  const total =
    job.totalMs === null ? undefined : setTimeout(() => expire(`not whole within ${job.totalMs} ms`), job.totalMs)
  let window: ReturnType<typeof setInterval> | undefined
  try {
    const res = await steps
      .followRedirects({ ...job.follow, signal: controller.signal, onRequest: events.onRequest })
      .catch((err: unknown) => {
        throw late ?? err
      })
    if (!res.ok) {
      await res.body?.cancel()
      return {
        status: res.status,
        retryAfter: res.headers.get('retry-after'),
        wwwAuthenticate: res.headers.get('www-authenticate'),
      }
    }
    const reader = res.body === null ? null : res.body.getReader()
    // Each window must bring its floor of bytes: a body that trickles fails as one that is silent.
    let windowBytes = 0
    window = setInterval(() => {
      if (windowBytes < job.windowBytes)
        expire(`${windowBytes} bytes in ${job.windowMs} ms, fewer than the ${job.windowBytes} a download must bring`)
      windowBytes = 0
    }, job.windowMs)
    async function* chunks(): AsyncGenerator<Uint8Array> {
      if (reader === null) return
      let finished = false
      try {
        for (;;) {
          const { done, value } = await reader.read().catch((err: unknown) => {
            throw late ?? err
          })
          if (late !== null) throw late
          if (signal.aborted) throw new Error('the download was stopped')
          if (done) break
          windowBytes += value.length
          yield value
        }
        finished = true
      } finally {
        // Stopped early (a bound, an abort): the body ends, no socket is left half read.
        if (!finished) await reader.cancel().catch(() => undefined)
      }
    }
    const step = Math.max(256 * 1024, (job.store.size ?? 0) / 100)
    let reported = 0
    const stored = await steps.storeVerified(req, job.store, chunks(), (bytes) => {
      if (bytes - reported < step && bytes !== job.store.size) return
      reported = bytes
      events.onBytes(bytes)
    })
    return { stored }
  } finally {
    clearTimeout(total)
    clearInterval(window)
    signal.removeEventListener('abort', stopped)
  }
}
