/**
 * Plain HTTP through the sandbox's proxy is forwarded as bytes after its head is read
 * (lib/network/proxy.ts, http-head.ts; issue 34). What the policy checked must be all that is forwarded:
 * a request smuggled behind an allowed one, a Host field naming another site, a head past the
 * limit or framed two ways never reach anyone. The attacker writes raw bytes to proxy.sock, as
 * root in the sandbox can through the relay (which passes its bytes unchanged).
 */
import net from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { HEAD_MAX_BYTES } from '../../lib/network/http-head.js'
import { parseNetworkOption } from '../../lib/network/policy.js'
import { openUnix, startTestNetwork } from '../helpers/egress.js'

/**
 * An allowed upstream that records every request it gets, each on its own (a kept connection
 * carries several), and answers keep-alive, to tempt reuse.
 */
let received: string[] = []
let upstream: net.Server
let upPort = 0
/** A denied host service that counts who reaches it. */
let secret: net.Server & { port: number }
let secretConnections = 0
let network: Awaited<ReturnType<typeof startTestNetwork>>
beforeAll(async () => {
  upstream = net.createServer((s) => {
    let i = -1
    let answered = true
    s.on('error', () => {})
    s.on('data', (d) => {
      const text = d.toString('latin1')
      // A new request line after an answer starts a new record; a body's later bytes join their request's.
      if (answered && (i < 0 || /^[A-Z]+ \//.test(text))) {
        i = received.push('') - 1
        answered = false
      }
      received[i] += text
      if (!answered && received[i].includes('\r\n\r\n')) {
        answered = true
        const body = `upstream ${received[i].split(' ')[1]}\n`
        s.write(
          `HTTP/1.1 200 OK\r\nContent-Length: ${body.length}\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nProxy-Authenticate: Basic\r\n\r\n${body}`,
        )
      }
    })
    s.on('end', () => s.end())
  })
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', () => resolve()))
  upPort = (upstream.address() as net.AddressInfo).port
  secret = Object.assign(
    net.createServer((s) => {
      secretConnections++
      s.on('error', () => {})
      s.end('HTTP/1.1 200 OK\r\nContent-Length: 27\r\n\r\nSECRET-OF-A-DENIED-SERVICE\n')
    }),
    { port: 0 },
  )
  await new Promise<void>((resolve) => secret.listen(0, '127.0.0.1', () => resolve()))
  secret.port = (secret.address() as net.AddressInfo).port
  network = await startTestNetwork(
    parseNetworkOption({
      allow: [`127.0.0.1:${upPort}`, `site.test:${upPort}`],
      hosts: { 'site.test': '127.0.0.1' },
      allowHostLoopback: true,
    })!,
  )
})
afterAll(async () => {
  await network.close()
  upstream.close()
  secret.close()
})

/** Writes `bytes` to the proxy's socket (then half-closes, as nc does); everything that came back once it closed. */
async function exchange(bytes: string | Buffer): Promise<string> {
  const s = await openUnix(network.proxyPath)
  return new Promise((resolve) => {
    let got = ''
    s.on('data', (d) => (got += d.toString('latin1')))
    s.on('error', () => {})
    s.once('close', () => resolve(got))
    s.end(bytes)
  })
}

const allowed = (path: string) => `http://127.0.0.1:${upPort}${path}`
const denied = () => `http://127.0.0.1:${secret.port}/`

describe('plain HTTP through the proxy', () => {
  it('proxy: a request pipelined behind an allowed one (no body, Content-Length, chunked) to a denied host is refused', async () => {
    const smuggled = `GET ${denied()} HTTP/1.1\r\nHost: 127.0.0.1:${secret.port}\r\n\r\n`
    const attempts = [
      `GET ${allowed('/first')} HTTP/1.1\r\nHost: x\r\n\r\n${smuggled}`,
      `POST ${allowed('/first')} HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello${smuggled}`,
      `POST ${allowed('/first')} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n${smuggled}`,
    ]
    for (const attempt of attempts) {
      received = []
      const got = await exchange(attempt)
      expect(got, attempt).toMatch(/^HTTP\/1\.1 200 [^]*upstream \/first\n$/)
      expect(got, attempt).not.toContain('SECRET')
      // The upstream got one request and its body, not one byte of the smuggled one.
      expect(received, attempt).toHaveLength(1)
      expect(received[0], attempt).not.toContain(`${secret.port}`)
      expect(secretConnections, attempt).toBe(0)
      expect(received[0], attempt).toMatch(
        /^POST \/first HTTP\/1\.1\r\n[^]*\r\n\r\n(hello|5\r\nhello\r\n0\r\n\r\n)$|^GET \/first HTTP\/1\.1\r\n[^]*\r\n\r\n$/,
      )
    }
  })

  it('proxy: a Host field naming another site than the allowed target is replaced by the target', async () => {
    received = []
    const got = await exchange(
      `GET http://site.test:${upPort}/h HTTP/1.1\r\nHost: denied.example\r\nhost: another.example\r\n\r\n`,
    )
    expect(got).toMatch(/^HTTP\/1\.1 200 /)
    expect(received[0]).toMatch(new RegExp(`\\r\\nHost: site\\.test:${upPort}\\r\\n`))
    expect(received[0]).not.toMatch(/example/)
  })

  it('proxy: hop-by-hop and Proxy-* fields, and fields the Connection field names, passing to the upstream are dropped', async () => {
    received = []
    const got = await exchange(
      `GET ${allowed('/hop')} HTTP/1.1\r\nProxy-Authorization: Basic c2VjcmV0\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive, X-Private\r\nX-Private: secret\r\nKeep-Alive: 300\r\nTE: trailers\r\nUpgrade: websocket\r\nX-Kept: yes\r\n\r\n`,
    )
    expect(received[0]).not.toMatch(/proxy-|x-private|keep-alive|upgrade|\r\nte:/i)
    // Bodiless: the upstream may keep the connection for the next request (the proxy's pool), and no field says otherwise.
    expect(received[0]).toMatch(/\r\nX-Kept: yes\r\n\r\n$/)
    // The answer comes back with one request per connection said, the upstream's own hop fields gone.
    expect(got).toMatch(/\r\nConnection: close\r\n/)
    expect(got).not.toMatch(/keep-alive|Proxy-Authenticate/i)
  })

  it('proxy: a head past the limit, or framed two ways, or with folded or spaced fields, reaching the upstream is refused', async () => {
    const big = `GET ${allowed('/big')} HTTP/1.1\r\nX-Fill: ${'a'.repeat(HEAD_MAX_BYTES)}\r\n\r\n`
    received = []
    expect(await exchange(big)).toMatch(/^HTTP\/1\.1 431 /)
    const ambiguous = [
      `POST ${allowed('/cl-te')} HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
      `POST ${allowed('/cl-cl')} HTTP/1.1\r\nContent-Length: 4\r\nContent-Length: 40\r\n\r\nabcd`,
      `POST ${allowed('/te')} HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n`,
      `POST ${allowed('/te2')} HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n`,
      `GET ${allowed('/fold')} HTTP/1.1\r\nX-A: a\r\n Transfer-Encoding: chunked\r\n\r\n`,
      `GET ${allowed('/space')} HTTP/1.1\r\nContent-Length : 5\r\n\r\nhello`,
      `GET ${allowed('/lf')} HTTP/1.1\r\nX-A: a\nContent-Length: 5\r\n\r\nhello`,
    ]
    for (const attempt of ambiguous) expect(await exchange(attempt), attempt).toMatch(/^HTTP\/1\.1 400 /)
    // A chunked body whose framing breaks mid-way: cut, and the upstream sees only the well-framed part.
    const broken = await exchange(
      `POST ${allowed('/broken')} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhelloXX\r\nGET ${denied()} HTTP/1.1\r\n\r\n`,
    )
    expect(broken).not.toContain('SECRET')
    expect(received.join('')).not.toMatch(/\/big|cl-te|cl-cl|\/te|fold|space|\/lf|SECRET|GET http/)
  })

  it('proxy: 64 concurrent requests with bodies each reach their own destination whole', async () => {
    received = []
    const answers = await Promise.all(
      Array.from({ length: 64 }, (_, i) => {
        const body = `body-${i}-`.repeat(500)
        return exchange(
          i % 2
            ? `POST ${allowed(`/c${i}`)} HTTP/1.1\r\nContent-Length: ${body.length}\r\n\r\n${body}`
            : `POST ${allowed(`/c${i}`)} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n${body.length.toString(16)}\r\n${body}\r\n0\r\nX-T: 1\r\n\r\n`,
        )
      }),
    )
    answers.forEach((got, i) => expect(got).toMatch(new RegExp(`^HTTP/1\\.1 200 [^]*upstream /c${i}\\n$`)))
    expect(received).toHaveLength(64)
    for (const r of received) {
      const i = /^POST \/c(\d+) /.exec(r)![1]
      expect(r).toContain(`body-${i}-`.repeat(500))
    }
    // A denied destination is still answered 403 at once.
    expect(await exchange(`GET ${denied()} HTTP/1.1\r\n\r\n`)).toMatch(/^HTTP\/1\.1 403 /)
  })
})
