/**
 * A client for the distribution API v2: manifests and blobs, with anonymous, Basic and
 * Bearer-token auth (the registry's WWW-Authenticate challenge decides). Redirects are
 * followed by hand so that credentials never go to another origin (scheme, host or port),
 * 429/503 answers wait for Retry-After (bounded), and every body is bounded in size.
 */
import { Readable } from 'node:stream'
import type { ReadableStream as WebReadableStream } from 'node:stream/web'
import { credentialsFor, type Credentials } from './credentials.js'
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
}

const MAX_REDIRECTS = 5
const MAX_RETRIES = 4
const MAX_RETRY_AFTER_MS = 30_000
const REQUEST_TIMEOUT_MS = 60_000
const MAX_TOKEN_BYTES = 1024 * 1024

function parseChallenge(header: string): { scheme: string; params: Record<string, string> } {
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

export class RegistryClient {
  readonly base: string
  private authorization: string | null = null
  /** Each response's abort, to end a body that stalls. */
  private readonly aborts = new WeakMap<Response, AbortController>()
  private credentials: Promise<Credentials | null> | null = null

  constructor(
    readonly ref: ImageReference,
    private readonly options: RegistryOptions = {},
  ) {
    this.base = registryBaseUrl(ref.registry, options.insecure)
  }

  private creds(): Promise<Credentials | null> {
    this.credentials ??= credentialsFor(this.ref.registry, this.options.env)
    return this.credentials
  }

  /** GET with auth, retries and same-origin-only credentials. The caller consumes the body. */
  private async get(pathname: string, accept: string | null, kind: 'manifest' | 'blob'): Promise<Response> {
    let authRetried = false
    for (let attempt = 0; ; attempt += 1) {
      const res = await this.follow(`${this.base}${pathname}`, accept, kind)
      if (res.status === 401 && !authRetried) {
        authRetried = true
        await res.body?.cancel()
        await this.authenticate(res.headers.get('www-authenticate'))
        continue
      }
      if (
        (res.status === 429 || res.status === 503 || res.status === 502 || res.status === 504) &&
        attempt < MAX_RETRIES
      ) {
        await res.body?.cancel()
        await new Promise((resolve) => setTimeout(resolve, retryAfterMs(res.headers.get('retry-after'), attempt)))
        continue
      }
      if (res.ok) return res
      await res.body?.cancel()
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

  /** Follows redirects; Authorization goes only to the registry's own origin. */
  private async follow(url: string, accept: string | null, kind: 'manifest' | 'blob'): Promise<Response> {
    const origin = new URL(this.base).origin
    let current = url
    for (let hop = 0; hop <= MAX_REDIRECTS; hop += 1) {
      const target = new URL(current)
      if (target.protocol !== 'https:' && target.protocol !== 'http:')
        throw new RegistryError(`redirect to ${target.protocol} refused`, null, false)
      const headers: Record<string, string> = {}
      if (accept !== null) headers.accept = accept
      if (this.authorization !== null && target.origin === origin) headers.authorization = this.authorization
      this.options.onRequest?.(kind, current)
      let res: Response
      try {
        // A deadline for the answer's headers; a body (a layer of gigabytes) is bounded by stalls instead (blob()).
        const controller = new AbortController()
        const timer = setTimeout(
          () => controller.abort(new Error(`no answer within ${REQUEST_TIMEOUT_MS} ms`)),
          REQUEST_TIMEOUT_MS,
        )
        try {
          res = await fetch(current, { headers, redirect: 'manual', signal: controller.signal })
        } finally {
          clearTimeout(timer)
        }
        this.aborts.set(res, controller)
      } catch (err) {
        const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).message
        throw new RegistryError(`cannot reach ${target.origin}: ${cause}`, null, true)
      }
      if (res.status < 300 || res.status >= 400 || res.status === 304) return res
      const location = res.headers.get('location')
      await res.body?.cancel()
      if (location === null) throw new RegistryError(`${current}: redirect without a Location`, res.status, false)
      current = new URL(location, current).toString()
    }
    throw new RegistryError(`${url}: more than ${MAX_REDIRECTS} redirects`, null, false)
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
        `${this.ref.registry} asked for unsupported authentication ${JSON.stringify(header)}`,
        401,
        false,
      )
    const realm = new URL(challenge.params.realm)
    if (realm.protocol !== 'https:' && !(realm.protocol === 'http:' && this.base.startsWith('http:')))
      throw new RegistryError(`token realm ${realm.origin} is not HTTPS`, 401, false)
    if (challenge.params.service) realm.searchParams.set('service', challenge.params.service)
    realm.searchParams.set('scope', challenge.params.scope ?? `repository:${this.ref.repository}:pull`)
    this.options.onRequest?.('token', realm.toString())
    let res: Response
    try {
      // The token endpoint is told by the registry itself; it gets the credentials, redirects do not.
      res = await fetch(realm, {
        headers: basic === null ? {} : { authorization: basic },
        redirect: 'error',
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      })
    } catch (err) {
      throw new RegistryError(`cannot reach the token service ${realm.origin}: ${(err as Error).message}`, null, true)
    }
    if (!res.ok) {
      await res.body?.cancel()
      throw new RegistryError(
        `the token service ${realm.origin} refused: HTTP ${res.status}${creds === null ? ' (no credentials configured)' : ''}`,
        res.status,
        res.status >= 500,
      )
    }
    const body = JSON.parse((await readBounded(res, MAX_TOKEN_BYTES, 'the token')).toString('utf8')) as {
      token?: string
      access_token?: string
    }
    const token = body.token ?? body.access_token
    if (typeof token !== 'string' || token === '')
      throw new RegistryError(`the token service ${realm.origin} returned no token`, res.status, false)
    this.authorization = `Bearer ${token}`
  }

  /** A manifest or index by tag or digest: its bytes, Content-Type and digest as served. */
  async manifest(
    reference: string,
  ): Promise<{ body: Buffer; contentType: string | null; digestHeader: string | null }> {
    const res = await this.get(`/v2/${this.ref.repository}/manifests/${reference}`, MANIFEST_ACCEPT, 'manifest')
    const body = await readBounded(res, MAX_MANIFEST_BYTES, `manifest ${reference}`)
    return {
      body,
      contentType: res.headers.get('content-type'),
      digestHeader: res.headers.get('docker-content-digest'),
    }
  }

  /**
   * A blob's byte stream, ended with an error when no byte comes for a minute; the caller
   * verifies it against its digest. Read from the response's own reader, each chunk a view
   * of its bytes: a Readable wrapped around it would concatenate buffered chunks into fresh
   * buffers, and that garbage (tens of MB per pull) made the collector stall the event loop.
   */
  async blob(digest: string): Promise<AsyncIterable<Buffer>> {
    const res = await this.get(`/v2/${this.ref.repository}/blobs/${digest}`, null, 'blob')
    if (res.body === null) return (async function* () {})()
    const reader = (res.body as unknown as WebReadableStream<Uint8Array>).getReader()
    const controller = this.aborts.get(res)
    let timer: NodeJS.Timeout | undefined
    // Set when the body stalled: whatever the pending read then answers, this is the error.
    let stalled: RegistryError | null = null
    const arm = () => {
      clearTimeout(timer)
      timer = setTimeout(() => {
        stalled = new RegistryError(`blob ${digest}: no data for ${REQUEST_TIMEOUT_MS} ms`, null, true)
        controller?.abort(stalled)
        reader.cancel(stalled).catch(() => undefined)
      }, REQUEST_TIMEOUT_MS)
    }
    return (async function* () {
      let finished = false
      try {
        arm()
        for (;;) {
          const { done, value } = await reader.read().catch((err: unknown) => {
            throw stalled ?? err
          })
          if (stalled !== null) throw stalled
          if (done) break
          arm()
          yield Buffer.from(value.buffer, value.byteOffset, value.byteLength)
        }
        finished = true
      } finally {
        clearTimeout(timer)
        // A consumer that stopped early (a bound, an abort) ends the body: no socket left half read.
        if (!finished) await reader.cancel().catch(() => undefined)
      }
    })()
  }
}
