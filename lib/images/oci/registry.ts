/**
 * A client for the distribution API v2: manifests and blobs, with anonymous, Basic and
 * Bearer-token auth (the registry's WWW-Authenticate challenge decides). Redirects are
 * followed by hand so that credentials never go to another origin (scheme, host or port),
 * 429/503 answers wait for Retry-After (bounded), and every body is bounded in size and time:
 * a small body (manifest, token, config) must be whole within a deadline, headers included; a
 * layer's body must keep coming (a floor of bytes per window, so a trickle fails like a
 * silence). A read past its deadline is aborted, its socket destroyed. Blobs download in a
 * worker thread (blob-download.ts) straight into the blob store.
 */
import { Readable } from 'node:stream'
import type { ReadableStream as WebReadableStream } from 'node:stream/web'
import { BlobDownloader, type BlobJobError } from './blob-download.js'
import { followRedirects, type BlobEvents, type FollowInput, type StoreInput } from './blob-transfer.js'
import { DigestMismatch } from './blobs.js'
import { credentialsFor, type Credentials } from './credentials.js'
import { describe } from '../../options.js'
import { MANIFEST_ACCEPT, MAX_MANIFEST_BYTES } from './manifest.js'
import { registryBaseUrl, type ImageReference } from './reference.js'

export class RegistryError extends Error {
  constructor(
    message: string,
    readonly status: number | null,
    readonly retryable: boolean,
  ) {
    super(message)
  }
}

export interface RegistryOptions {
  /** Registries (host[:port]) spoken to over plain HTTP besides loopback ones. */
  insecure?: readonly string[]
  env?: NodeJS.ProcessEnv
  /** Counts requests by kind, for tests and benches. */
  onRequest?: (kind: 'manifest' | 'blob' | 'token', url: string) => void
  /** Tests: shorter deadlines (REGISTRY_DEADLINES). */
  deadlines?: Partial<RegistryDeadlines>
}

export interface RegistryDeadlines {
  /** A small body (manifest, token, config blob) is whole within this, its headers included. */
  smallMs: number
  /** A blob's answer has its headers within this. */
  headersMs: number
  /** A blob's body that brings fewer than `windowBytes` in any window of this long fails: a silence or a trickle. */
  windowMs: number
  windowBytes: number
}

/** A minute for what is small; a layer must bring 64 KiB a minute (about 1 KiB/s), however long it is. */
export const REGISTRY_DEADLINES: RegistryDeadlines = {
  smallMs: 60_000,
  headersMs: 60_000,
  windowMs: 60_000,
  windowBytes: 64 * 1024,
}

const MAX_REDIRECTS = 5
const MAX_RETRIES = 4
const MAX_RETRY_AFTER_MS = 30_000
const MAX_TOKEN_BYTES = 1024 * 1024
/** A blob bounded to this (a config: small JSON) gets a small body's total deadline on top of the window. */
const SMALL_BLOB_BYTES = 8 * 1024 * 1024

export function parseChallenge(header: string): { scheme: string; params: Record<string, string> } {
  const m = /^\s*(\w+)\s*(.*)$/s.exec(header)
  if (m === null) return { scheme: '', params: {} }
  const params: Record<string, string> = {}
  for (const p of m[2].matchAll(/(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]+))/g))
    params[p[1].toLowerCase()] = p[2] ?? p[3]
  return { scheme: m[1].toLowerCase(), params }
}

function retryAfterMs(value: string | null, attempt: number): number {
  const seconds = value === null ? NaN : Number(value)
  if (Number.isFinite(seconds) && seconds >= 0) return Math.min(seconds * 1000, MAX_RETRY_AFTER_MS)
  const date = value === null ? NaN : Date.parse(value)
  if (Number.isFinite(date)) return Math.min(Math.max(0, date - Date.now()), MAX_RETRY_AFTER_MS)
  return Math.min(500 * 2 ** attempt, MAX_RETRY_AFTER_MS)
}

/**
 * An abort after `ms`, for one request and its body. Held here with its timer and cleared when
 * the read is done (not AbortSignal.timeout, whose timer nothing here could clear or check).
 */
class Deadline {
  readonly #controller = new AbortController()
  readonly #timer: ReturnType<typeof setTimeout>
  expired = false

  constructor(readonly ms: number) {
    this.#timer = setTimeout(() => {
      this.expired = true
      this.#controller.abort()
    }, ms)
  }

  get signal(): AbortSignal {
    return this.#controller.signal
  }

  clear(): void {
    clearTimeout(this.#timer)
  }
}

async function readBounded(res: Response, max: number, what: string): Promise<Buffer> {
  const declared = Number(res.headers.get('content-length') ?? NaN)
  if (Number.isFinite(declared) && declared > max)
    throw new RegistryError(`${what} is ${declared} bytes (at most ${max})`, res.status, false)
  const chunks: Buffer[] = []
  let size = 0
  if (res.body === null) return Buffer.alloc(0)
  for await (const chunk of Readable.fromWeb(res.body as unknown as WebReadableStream<Uint8Array>)) {
    size += (chunk as Buffer).length
    if (size > max) throw new RegistryError(`${what} is larger than ${max} bytes`, res.status, false)
    chunks.push(chunk as Buffer)
  }
  return Buffer.concat(chunks)
}

/** An answer as the retry rules see it: its status, two headers, and its value when it is a 2xx. */
interface Answer<T> {
  status: number
  header(name: 'retry-after' | 'www-authenticate'): string | null
  discard(): Promise<void>
  value: T
}

export class RegistryClient {
  readonly base: string
  private authorization: string | null = null
  private credentials: Promise<Credentials | null> | null = null
  private readonly downloads = new BlobDownloader()
  private readonly deadlines: RegistryDeadlines

  constructor(
    readonly ref: ImageReference,
    private readonly options: RegistryOptions = {},
  ) {
    this.base = registryBaseUrl(ref.registry, options.insecure)
    this.deadlines = { ...REGISTRY_DEADLINES, ...options.deadlines }
  }

  /** Starts the download worker while the manifests are fetched: a pull that will download. */
  warmDownloads(): void {
    this.downloads.warm()
  }

  /** Ends the download worker (a pull's last step, whatever its outcome). */
  close(): void {
    this.downloads.close()
  }

  private creds(): Promise<Credentials | null> {
    this.credentials ??= credentialsFor(this.ref.registry, this.options.env)
    return this.credentials
  }

  /** A GET of pathname as followRedirects takes it, with the credentials the client holds now. */
  private request(pathname: string, accept: string | null): Omit<FollowInput, 'signal' | 'onRequest'> {
    return {
      url: `${this.base}${pathname}`,
      accept,
      authorization: this.authorization,
      origin: new URL(this.base).origin,
      maxRedirects: MAX_REDIRECTS,
      headerTimeoutMs: this.deadlines.headersMs,
    }
  }

  /** Sends until answered: a 401 authenticates once, 429 and 5xx wait (Retry-After) and retry, any other failure is a RegistryError. */
  private async answered<T>(pathname: string, send: () => Promise<Answer<T>>): Promise<T> {
    let authRetried = false
    for (let attempt = 0; ; attempt += 1) {
      const res = await send()
      if (res.status === 401 && !authRetried) {
        authRetried = true
        await res.discard()
        await this.authenticate(res.header('www-authenticate'))
        continue
      }
      if (
        (res.status === 429 || res.status === 503 || res.status === 502 || res.status === 504) &&
        attempt < MAX_RETRIES
      ) {
        await res.discard()
        await new Promise((resolve) => setTimeout(resolve, retryAfterMs(res.header('retry-after'), attempt)))
        continue
      }
      if (res.status >= 200 && res.status < 300) return res.value
      await res.discard()
      const transient = res.status === 429 || res.status >= 500
      const why =
        res.status === 401 || res.status === 403
          ? 'access denied (check the credentials in your Docker config)'
          : res.status === 404
            ? 'not found'
            : `HTTP ${res.status}`
      throw new RegistryError(`${this.ref.registry}${pathname}: ${why}`, res.status, transient)
    }
  }

  /**
   * GET of a small body on this thread (manifests), redirects followed with same-origin-only
   * credentials: each try's answer and body whole within the small deadline, at most `max` bytes.
   */
  private async getSmall(
    pathname: string,
    accept: string,
    max: number,
    what: string,
  ): Promise<{ body: Buffer; headers: Headers }> {
    const url = `${this.base}${pathname}`
    return this.answered(pathname, async () => {
      const deadline = new Deadline(this.deadlines.smallMs)
      try {
        const res = await followRedirects({
          ...this.request(pathname, accept),
          signal: deadline.signal,
          onRequest: (to) => this.options.onRequest?.('manifest', to),
        })
        const ok = res.status >= 200 && res.status < 300
        const body = ok ? await readBounded(res, max, what) : Buffer.alloc(0)
        return {
          status: res.status,
          header: (name) => res.headers.get(name),
          discard: async () => void (await res.body?.cancel()),
          value: { body, headers: res.headers },
        }
      } catch (err) {
        throw deadline.expired ? notWhole(what, url, deadline.ms) : asRegistryError(err)
      } finally {
        deadline.clear()
      }
    })
  }

  private async authenticate(header: string | null): Promise<void> {
    const creds = await this.creds()
    const challenge = parseChallenge(header ?? '')
    const basic =
      creds === null ? null : `Basic ${Buffer.from(`${creds.username}:${creds.password}`).toString('base64')}`
    if (challenge.scheme === 'basic') {
      if (basic === null)
        throw new RegistryError(
          `${this.ref.registry} requires credentials and none are configured for it (docker login, or $DOCKER_CONFIG/config.json)`,
          401,
          false,
        )
      this.authorization = basic
      return
    }
    if (challenge.scheme !== 'bearer' || !challenge.params.realm)
      throw new RegistryError(
        `${this.ref.registry} asked for unsupported authentication ${describe(header)}`,
        401,
        false,
      )
    const realm = parseRealm(challenge.params.realm)
    // The realm is the registry's word: every message names its origin, capped.
    const service = `the token service ${describe(realm.origin)}`
    if (realm.protocol !== 'https:' && !(realm.protocol === 'http:' && this.base.startsWith('http:')))
      throw new RegistryError(`token realm ${describe(realm.origin)} is not HTTPS`, 401, false)
    if (challenge.params.service) realm.searchParams.set('service', challenge.params.service)
    realm.searchParams.set('scope', challenge.params.scope ?? `repository:${this.ref.repository}:pull`)
    this.options.onRequest?.('token', realm.toString())
    const deadline = new Deadline(this.deadlines.smallMs)
    try {
      let res: Response
      try {
        // The token endpoint is told by the registry itself; it gets the credentials, redirects do not.
        res = await fetch(realm, {
          headers: basic === null ? {} : { authorization: basic },
          redirect: 'error',
          signal: deadline.signal,
        })
      } catch (err) {
        if (deadline.expired) throw notWhole('the token', service, deadline.ms)
        throw new RegistryError(`cannot reach ${service}: ${(err as Error).message}`, null, true)
      }
      if (!res.ok) {
        await res.body?.cancel()
        throw new RegistryError(
          `${service} refused: HTTP ${res.status}${creds === null ? ' (no credentials configured)' : ''}`,
          res.status,
          res.status >= 500,
        )
      }
      const text = await readBounded(res, MAX_TOKEN_BYTES, 'the token').catch((err: unknown) => {
        throw deadline.expired ? notWhole('the token', service, deadline.ms) : err
      })
      const body = JSON.parse(text.toString('utf8')) as { token?: string; access_token?: string }
      const token = body.token ?? body.access_token
      if (typeof token !== 'string' || token === '')
        throw new RegistryError(`${service} returned no token`, res.status, false)
      this.authorization = `Bearer ${token}`
    } finally {
      deadline.clear()
    }
  }

  /** A manifest or index by tag or digest: its bytes, Content-Type and digest as served. */
  async manifest(
    reference: string,
  ): Promise<{ body: Buffer; contentType: string | null; digestHeader: string | null }> {
    const { body, headers } = await this.getSmall(
      `/v2/${this.ref.repository}/manifests/${reference}`,
      MANIFEST_ACCEPT,
      MAX_MANIFEST_BYTES,
      `manifest ${reference}`,
    )
    return { body, contentType: headers.get('content-type'), digestHeader: headers.get('docker-content-digest') }
  }

  /**
   * A blob into the store, verified against its digest, by the download worker; `onBytes` hears
   * its progress. A body that brings less than its window's floor fails (retryable), as does
   * `signal`; a small blob (a config) must also be whole within the small deadline.
   */
  async blobToStore(
    digest: string,
    store: StoreInput,
    onBytes: BlobEvents['onBytes'] = () => {},
    signal?: AbortSignal,
  ): Promise<string> {
    const pathname = `/v2/${this.ref.repository}/blobs/${digest}`
    const stored = await this.answered(pathname, async () => {
      const { windowMs, windowBytes, smallMs } = this.deadlines
      // A blob bounded to a few MiB (a config) is small; layers may take as long as they keep coming.
      const small = store.limit <= SMALL_BLOB_BYTES
      const job = {
        follow: this.request(pathname, null),
        store,
        windowMs,
        windowBytes,
        totalMs: small ? smallMs : null,
      }
      const onRequest = (url: string) => this.options.onRequest?.('blob', url)
      const answer = await this.downloads.run(job, { onRequest, onBytes }, signal).catch((err: BlobJobError) => {
        throw err.kind === 'digest'
          ? new DigestMismatch(err.message)
          : err.kind === undefined
            ? err
            : asRegistryError(err)
      })
      if ('stored' in answer) return { status: 200, header: () => null, discard: async () => {}, value: answer.stored }
      return {
        status: answer.status,
        header: (name) => (name === 'retry-after' ? answer.retryAfter : answer.wwwAuthenticate),
        discard: async () => {},
        value: null,
      }
    })
    return stored as string
  }
}

/** A small body cut off at its deadline: worth another try (the registry may be slow, not hostile). */
function notWhole(what: string, from: string, ms: number): RegistryError {
  return new RegistryError(`${what} from ${from} was not whole within ${ms} ms`, null, true)
}

/** The realm a Bearer challenge names, or a RegistryError that quotes it (capped). */
function parseRealm(realm: string): URL {
  try {
    return new URL(realm)
  } catch {
    throw new RegistryError(`token realm ${describe(realm)} is not a URL`, 401, false)
  }
}

/** followRedirects' failures: unreachable (retryable) or an answer that ends the request. */
function asRegistryError(err: unknown): RegistryError {
  const e = err as BlobJobError
  return new RegistryError(e.message, e.status ?? null, e.kind === 'network')
}
