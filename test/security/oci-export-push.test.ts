/**
 * A registry an export pushes to answers what it likes. The credentials (Basic, from the Docker
 * config) go only to the registry's own origin: not to the host an upload's Location names, nor
 * to where a redirect points. A registry that trickles its answers, or stops reading an upload,
 * fails the push at its deadline (S102, retryable) instead of holding it, and nothing is left:
 * no socket of the push stays open.
 */
import fs from 'node:fs'
import http from 'node:http'
import type net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { isSandboxError, type Sandbox } from '../../lib/index.js'
import { runtimesClosedAfterAll } from '../helpers/runtime.js'

const runtime = runtimesClosedAfterAll()
const CREDENTIALS = `Basic ${Buffer.from('pusher:secret').toString('base64')}`
let work: string
let sb: Sandbox
const savedDockerConfig = process.env.DOCKER_CONFIG

interface Server {
  port: number
  host: string
  /** Authorization headers it was sent, with the request. */
  seen: Array<{ method: string; url: string; authorization: string | undefined }>
  /** Its connections still open. */
  open(): number
  close(): Promise<void>
}

async function serve(
  handle: (req: http.IncomingMessage, res: http.ServerResponse, self: Server) => void,
): Promise<Server> {
  const sockets = new Set<net.Socket>()
  const self = {} as Server
  const server = http.createServer((req, res) => {
    self.seen.push({ method: req.method ?? '', url: req.url ?? '', authorization: req.headers.authorization })
    handle(req, res, self)
  })
  server.on('connection', (s) => {
    sockets.add(s)
    s.on('close', () => sockets.delete(s))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as net.AddressInfo).port
  Object.assign(self, {
    port,
    host: `127.0.0.1:${port}`,
    seen: [],
    open: () => sockets.size,
    close: async () => {
      for (const s of sockets) s.destroy()
      await new Promise((resolve) => server.close(resolve))
    },
  })
  return self
}

/** A registry that wants Basic credentials, then has no blob and takes uploads as `upload` says. */
function registry(upload: (req: http.IncomingMessage, res: http.ServerResponse) => void) {
  return (req: http.IncomingMessage, res: http.ServerResponse) => {
    if (req.headers.authorization !== CREDENTIALS) {
      req.resume()
      res.writeHead(401, { 'www-authenticate': 'Basic realm="test"' }).end()
    } else if (req.method === 'HEAD') res.writeHead(404).end()
    else upload(req, res)
  }
}

function useCredentialsFor(...hosts: string[]): void {
  fs.writeFileSync(
    path.join(work, 'docker', 'config.json'),
    JSON.stringify({ auths: Object.fromEntries(hosts.map((h) => [h, { auth: CREDENTIALS.slice('Basic '.length) }])) }),
  )
}

async function pushFails(ref: string, timeoutMs?: number): Promise<Error & { code: string; retryable: boolean }> {
  const err = await sb.commit({ push: ref, ...(timeoutMs !== undefined && { timeoutMs }) }).then(
    () => null,
    (e: unknown) => e,
  )
  if (!isSandboxError(err)) throw new Error(`expected a SandboxError, got ${String(err)}`)
  return err as Error & { code: string; retryable: boolean }
}

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-export-push-'))
  fs.mkdirSync(path.join(work, 'docker'))
  process.env.DOCKER_CONFIG = path.join(work, 'docker')
  sb = await runtime().create({ image: 'base' })
  await sb.exec('sh', ['-c', 'echo pushed > /workspace/f'])
})

afterAll(() => {
  if (savedDockerConfig === undefined) delete process.env.DOCKER_CONFIG
  else process.env.DOCKER_CONFIG = savedDockerConfig
  fs.rmSync(work, { recursive: true, force: true })
})

describe('export: a registry that misleads the push', () => {
  it('an upload Location on another host gets the blob without the credentials', async () => {
    const elsewhere = await serve((req, res) => {
      req.resume()
      req.on('end', () => res.writeHead(201).end())
    })
    const reg = await serve(
      registry((req, res) => {
        req.resume()
        if (req.method === 'POST')
          res.writeHead(202, { location: `http://${elsewhere.host}/v2/upload/1?state=x` }).end()
        else res.writeHead(201).end()
      }),
    )
    useCredentialsFor(reg.host)
    try {
      await sb.commit({ push: `${reg.host}/app/x:1` })
      expect(elsewhere.seen.filter((r) => r.method === 'PUT').length).toBeGreaterThan(0)
      expect(elsewhere.seen.map((r) => r.authorization)).toEqual(elsewhere.seen.map(() => undefined))
      expect(reg.seen.some((r) => r.authorization === CREDENTIALS)).toBe(true)
    } finally {
      await Promise.all([reg.close(), elsewhere.close()])
    }
  })

  it('a redirect of the manifest and of an upload to another host is followed without the credentials', async () => {
    const elsewhere = await serve((req, res) => {
      req.resume()
      req.on('end', () => res.writeHead(201).end())
    })
    const reg = await serve(
      registry((req, res) => {
        req.resume()
        if (req.method === 'POST') res.writeHead(202, { location: '/v2/app/y/blobs/uploads/1' }).end()
        else res.writeHead(307, { location: `http://${elsewhere.host}${req.url}` }).end()
      }),
    )
    useCredentialsFor(reg.host)
    try {
      await sb.commit({ push: `${reg.host}/app/y:1` })
      expect(elsewhere.seen.map((r) => r.method)).toContain('PUT')
      expect(elsewhere.seen.some((r) => r.url.includes('/manifests/1'))).toBe(true)
      expect(elsewhere.seen.map((r) => r.authorization)).toEqual(elsewhere.seen.map(() => undefined))
    } finally {
      await Promise.all([reg.close(), elsewhere.close()])
    }
  })
})

describe('export: a registry that stalls the push', () => {
  it('answers trickling a byte at a time fail at the deadline (S102, retryable), sockets closed', async () => {
    const timers = new Set<ReturnType<typeof setInterval>>()
    const reg = await serve((req, res) => {
      req.resume()
      const socket = res.socket!
      const head = Buffer.from('HTTP/1.1 200 OK\r\nx-slow: ' + 'a'.repeat(10_000))
      let at = 0
      const timer = setInterval(() => {
        if (socket.destroyed || at >= head.length) return clearInterval(timer)
        socket.write(head.subarray(at, (at += 1)))
      }, 20)
      timers.add(timer)
    })
    useCredentialsFor(reg.host)
    try {
      const started = Date.now()
      const err = await pushFails(`${reg.host}/app/slow:1`, 500)
      expect(err.code).toBe('S102')
      expect(err.retryable).toBe(true)
      expect(err.message).toMatch(/within 500 ms/)
      expect(Date.now() - started).toBeLessThan(30_000)
      await expect.poll(() => reg.open()).toBe(0)
    } finally {
      for (const t of timers) clearInterval(t)
      await reg.close()
    }
  })

  it('an answer whose body trickles fails at the deadline too: trickling does not stretch it', async () => {
    const timers = new Set<ReturnType<typeof setInterval>>()
    const reg = await serve(
      registry((req, res) => {
        req.resume()
        res.writeHead(202, { location: '/v2/app/t/blobs/uploads/1', 'content-length': '10000' })
        const timer = setInterval(() => (res.destroyed ? clearInterval(timer) : res.write('x')), 20)
        timers.add(timer)
      }),
    )
    useCredentialsFor(reg.host)
    try {
      const err = await pushFails(`${reg.host}/app/t:1`, 500)
      expect(err.code).toBe('S102')
      expect(err.retryable).toBe(true)
      expect(err.message).toMatch(/no whole answer within 500 ms/)
      await expect.poll(() => reg.open()).toBe(0)
    } finally {
      for (const t of timers) clearInterval(t)
      await reg.close()
    }
  })

  it('an upload the registry stops reading fails at the deadline, the connection closed', async () => {
    const unread: http.IncomingMessage[] = []
    const reg = await serve(
      registry((req, res) => {
        if (req.method === 'POST') {
          req.resume()
          res.writeHead(202, { location: '/v2/app/z/blobs/uploads/1' }).end()
        } else unread.push(req) // PUT: the body is not read and nothing is answered.
      }),
    )
    useCredentialsFor(reg.host)
    try {
      const err = await pushFails(`${reg.host}/app/z:1`, 500)
      expect(err.code).toBe('S102')
      expect(err.retryable).toBe(true)
      expect(err.message).toMatch(/no upload progress within 500 ms|no whole answer within 500 ms/)
      // Read now, the upload's connection ends: the push closed its side.
      for (const req of unread) req.resume()
      await expect.poll(() => reg.open()).toBe(0)
    } finally {
      await reg.close()
    }
  })
})
