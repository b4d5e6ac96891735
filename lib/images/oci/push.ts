/**
 * Pushing an exported image over the distribution API: each blob the registry lacks (HEAD) is
 * uploaded (POST, then one PUT of its bytes with its digest), then the manifest is PUT under the
 * tag. Credentials are the ones pulls use (credentials.ts), given as the registry's 401 asks:
 * Basic, or a Bearer token for `pull,push` from the token service it names.
 *
 * What a registry answers is not trusted: the Authorization header goes only to the registry's
 * own origin (scheme, host, port), so neither a redirect nor an upload Location that points
 * elsewhere carries it; answers are bounded in size; every request has a deadline: while bytes
 * go up it fails after `timeoutMs` without progress, and once they are sent the whole answer must
 * arrive within `timeoutMs`, however slowly it trickles.
 */
import { createReadStream } from 'node:fs'
import http from 'node:http'
import https from 'node:https'
import { credentialsFor, type Credentials } from './credentials.js'
import type { ImageParts } from './layout-writer.js'
import { registryBaseUrl, type ImageReference } from './reference.js'
import { RegistryError, parseChallenge } from './registry.js'

export interface PushInput {
  ref: ImageReference
  parts: ImageParts
  insecure: readonly string[]
  timeoutMs: number
  env?: NodeJS.ProcessEnv
}

interface Answer {
  status: number
  headers: http.IncomingHttpHeaders
  body: Buffer
  url: URL
}

type Body = { bytes: Buffer } | { file: string; size: number } | null

const MAX_ANSWER_BYTES = 1024 * 1024
const MAX_REDIRECTS = 5

export async function pushImage(input: PushInput): Promise<void> {
  const pusher = new Pusher(input)
  try {
    for (const layer of input.parts.layers) await pusher.blob(layer.digest, { file: layer.file, size: layer.size })
    await pusher.blob(input.parts.config.digest, { bytes: input.parts.config.body })
    await pusher.manifest(
      input.ref.tag as string,
      input.parts.manifest.body,
      input.parts.manifest.mediaType,
      input.parts.manifest.digest,
    )
  } finally {
    pusher.close()
  }
}

class Pusher {
  readonly #base: URL
  readonly #repo: string
  readonly #agent: http.Agent
  #authorization: string | null = null
  #credentials: Promise<Credentials | null> | null = null

  constructor(readonly input: PushInput) {
    this.#base = new URL(registryBaseUrl(input.ref.registry, input.insecure))
    this.#repo = input.ref.repository
    // One agent per push, destroyed at its end: no socket outlives it.
    this.#agent =
      this.#base.protocol === 'https:' ? new https.Agent({ keepAlive: true }) : new http.Agent({ keepAlive: true })
  }

  close(): void {
    this.#agent.destroy()
  }

  async blob(digest: string, body: Exclude<Body, null>): Promise<void> {
    const blobUrl = this.#url(`/v2/${this.#repo}/blobs/${digest}`)
    const head = await this.#call('HEAD', blobUrl, {}, null)
    if (head.status === 200) return
    if (head.status !== 404) throw this.#refused(head, `blob ${digest}`)
    const start = await this.#call('POST', this.#url(`/v2/${this.#repo}/blobs/uploads/`), {}, null)
    const location = start.headers.location
    if (start.status !== 202 || typeof location !== 'string') throw this.#refused(start, `an upload of ${digest}`)
    const upload = new URL(location, start.url)
    upload.searchParams.set('digest', digest)
    const size = 'bytes' in body ? body.bytes.length : body.size
    const put = await this.#call(
      'PUT',
      upload,
      { 'content-type': 'application/octet-stream', 'content-length': String(size) },
      body,
    )
    if (put.status !== 201 && put.status !== 204) throw this.#refused(put, `blob ${digest}`)
  }

  async manifest(tag: string, body: Buffer, mediaType: string, digest: string): Promise<void> {
    const res = await this.#call(
      'PUT',
      this.#url(`/v2/${this.#repo}/manifests/${tag}`),
      { 'content-type': mediaType, 'content-length': String(body.length) },
      { bytes: body },
    )
    if (res.status !== 201 && res.status !== 204) throw this.#refused(res, `the manifest for tag ${tag}`)
    const stored = res.headers['docker-content-digest']
    if (typeof stored === 'string' && stored !== '' && stored !== digest)
      throw new RegistryError(
        `${this.input.ref.registry} stored the manifest as ${stored}, not ${digest}`,
        res.status,
        false,
      )
  }

  #url(pathname: string): URL {
    return new URL(pathname, this.#base)
  }

  /** A request, authenticated once if the registry answers 401, redirects followed by hand. */
  async #call(method: string, url: URL, headers: Record<string, string>, body: Body): Promise<Answer> {
    let res = await this.#following(method, url, headers, body)
    if (res.status === 401) {
      await this.#authenticate(res.headers['www-authenticate'])
      res = await this.#following(method, url, headers, body)
    }
    return res
  }

  async #following(method: string, url: URL, headers: Record<string, string>, body: Body): Promise<Answer> {
    let current = url
    for (let hop = 0; hop <= MAX_REDIRECTS; hop += 1) {
      if (current.protocol !== 'http:' && current.protocol !== 'https:')
        throw new RegistryError(`${this.input.ref.registry}: redirect to ${current.protocol} refused`, null, false)
      // Credentials only to the registry's own origin, never to where it points.
      const auth: Record<string, string> =
        this.#authorization !== null && current.origin === this.#base.origin
          ? { authorization: this.#authorization }
          : {}
      const res = await this.#send(method, current, { ...headers, ...auth }, body)
      const location = res.headers.location
      if (res.status < 300 || res.status >= 400 || res.status === 304 || typeof location !== 'string') return res
      current = new URL(location, current)
    }
    throw new RegistryError(`${this.input.ref.registry}: more than ${MAX_REDIRECTS} redirects`, null, false)
  }

  /** One HTTP exchange under the push's deadlines. */
  #send(method: string, url: URL, headers: Record<string, string>, body: Body): Promise<Answer> {
    const { timeoutMs } = this.input
    const mod = url.protocol === 'https:' ? https : http
    return new Promise<Answer>((resolve, reject) => {
      let settled = false
      let timer: ReturnType<typeof setTimeout> | undefined
      const fail = (err: Error) => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        req.destroy()
        reject(err)
      }
      const deadline = (what: string) => {
        clearTimeout(timer)
        timer = setTimeout(
          () => fail(new RegistryError(`${url.origin}: ${what} within ${timeoutMs} ms`, null, true)),
          timeoutMs,
        )
      }
      const req = mod.request(url, { method, headers, agent: this.#agent })
      deadline(body === null ? 'no answer' : 'no upload progress')
      req.on('error', (err: NodeJS.ErrnoException) =>
        fail(new RegistryError(`cannot reach ${url.origin}: ${err.code ?? err.message}`, null, true)),
      )
      req.on('response', (res) => {
        const chunks: Buffer[] = []
        let size = 0
        res.on('data', (chunk: Buffer) => {
          size += chunk.length
          if (size > MAX_ANSWER_BYTES)
            fail(
              new RegistryError(
                `${url.origin}: an answer larger than ${MAX_ANSWER_BYTES} bytes`,
                res.statusCode ?? null,
                false,
              ),
            )
          else chunks.push(chunk)
        })
        res.on('error', (err) => fail(new RegistryError(`${url.origin}: ${err.message}`, null, true)))
        res.on('end', () => {
          if (settled) return
          settled = true
          clearTimeout(timer)
          // Answered before taking the whole body (a refusal): the rest is not sent.
          if (!bodySent) req.destroy()
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks), url })
        })
      })
      // The answer, once the body is sent, has one deadline: trickling cannot stretch it.
      let bodySent = false
      const sent = () => {
        bodySent = true
        if (!settled) deadline('no whole answer')
      }
      if (body === null) req.end(sent)
      else if ('bytes' in body) req.end(body.bytes, sent)
      else {
        const file = createReadStream(body.file, { highWaterMark: 1024 * 1024 })
        file.on('data', () => deadline('no upload progress'))
        file.on('error', (err) => fail(err))
        file.on('end', () => req.end(sent))
        file.pipe(req, { end: false })
        req.on('close', () => file.destroy())
      }
    })
  }

  async #authenticate(header: string | string[] | undefined): Promise<void> {
    const registry = this.input.ref.registry
    this.#credentials ??= credentialsFor(registry, this.input.env).catch((err: Error) => {
      throw new RegistryError(`credentials for ${registry}: ${err.message}`, null, false)
    })
    const creds = await this.#credentials
    const challenge = parseChallenge(typeof header === 'string' ? header : '')
    const basic =
      creds === null ? null : `Basic ${Buffer.from(`${creds.username}:${creds.password}`).toString('base64')}`
    if (challenge.scheme === 'basic') {
      if (basic === null)
        throw new RegistryError(
          `${registry} requires credentials and none are configured for it (docker login, or $DOCKER_CONFIG/config.json)`,
          401,
          false,
        )
      this.#authorization = basic
      return
    }
    if (challenge.scheme !== 'bearer' || !challenge.params.realm)
      throw new RegistryError(
        `${registry} asked for unsupported authentication ${JSON.stringify(header ?? '')}`,
        401,
        false,
      )
    const realm = new URL(challenge.params.realm)
    if (realm.protocol !== 'https:' && !(realm.protocol === 'http:' && this.#base.protocol === 'http:'))
      throw new RegistryError(`token realm ${realm.origin} is not HTTPS`, 401, false)
    if (challenge.params.service) realm.searchParams.set('service', challenge.params.service)
    realm.searchParams.set('scope', `repository:${this.#repo}:pull,push`)
    // The token service is the one the registry names: it gets the credentials, a redirect from it does not.
    const res = await this.#send('GET', realm, basic === null ? {} : { authorization: basic }, null)
    if (res.status !== 200)
      throw new RegistryError(
        `the token service ${realm.origin} refused: HTTP ${res.status}${creds === null ? ' (no credentials configured)' : ''}`,
        res.status,
        res.status >= 500,
      )
    let token: unknown
    try {
      const doc = JSON.parse(res.body.toString('utf8')) as { token?: unknown; access_token?: unknown }
      token = doc.token ?? doc.access_token
    } catch {
      token = undefined
    }
    if (typeof token !== 'string' || token === '')
      throw new RegistryError(`the token service ${realm.origin} returned no token`, res.status, false)
    this.#authorization = `Bearer ${token}`
  }

  #refused(res: Answer, what: string): RegistryError {
    const why =
      res.status === 401 || res.status === 403
        ? `access denied (HTTP ${res.status}; check the credentials in your Docker config)`
        : `HTTP ${res.status}`
    return new RegistryError(
      `${this.input.ref.registry} refused ${what}: ${why}`,
      res.status,
      res.status === 429 || res.status >= 500,
    )
  }
}
