/**
 * Test fixture: a Bearer token service for docker-registry. It signs RS256 JWTs with a key
 * whose self-signed certificate the registry trusts (rootcertbundle); the header's kid is the
 * key's libtrust id (base32 of the first 240 bits of the SPKI's sha256, in groups of four).
 */
import { spawnSync } from 'node:child_process'
import { createHash, createPrivateKey, createPublicKey, randomBytes, sign } from 'node:crypto'
import fs from 'node:fs'
import http from 'node:http'
import path from 'node:path'

const BASE32 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ234567'

function base32(data: Buffer): string {
  let bits = 0
  let value = 0
  let out = ''
  for (const byte of data) {
    value = (value << 8) | byte
    bits += 8
    while (bits >= 5) {
      out += BASE32[(value >>> (bits - 5)) & 31]
      bits -= 5
    }
  }
  if (bits > 0) out += BASE32[(value << (5 - bits)) & 31]
  return out
}

const b64url = (data: Buffer | string) => Buffer.from(data).toString('base64url')

export interface TokenServer {
  realm: string
  service: string
  issuer: string
  certFile: string
  /** Requests the service received: whether they carried credentials, and the scope asked. */
  requests: Array<{ authorized: boolean; scope: string | null }>
  /** A token for the given repository and actions, as the service would issue. */
  token(repository: string, actions: string[]): string
  close(): void
}

export async function startTokenServer(dir: string, users: Record<string, string>): Promise<TokenServer> {
  const keyFile = path.join(dir, 'token.key')
  const certFile = path.join(dir, 'token.crt')
  const made = spawnSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      keyFile,
      '-out',
      certFile,
      '-days',
      '1',
      '-subj',
      '/CN=krunbox-test-token',
    ],
    { encoding: 'utf8' },
  )
  if (made.status !== 0) throw new Error(`openssl failed: ${made.stderr}`)
  const key = createPrivateKey(fs.readFileSync(keyFile))
  const spki = createPublicKey(key).export({ type: 'spki', format: 'der' })
  const kid = base32(createHash('sha256').update(spki).digest().subarray(0, 30)).match(/.{4}/g)!.join(':')
  const service = 'krunbox-test-registry'
  const issuer = 'krunbox-test-issuer'
  const token = (repository: string, actions: string[]) => {
    const now = Math.floor(Date.now() / 1000)
    const header = b64url(JSON.stringify({ typ: 'JWT', alg: 'RS256', kid }))
    const claims = b64url(
      JSON.stringify({
        iss: issuer,
        sub: 'test',
        aud: service,
        exp: now + 600,
        nbf: now - 60,
        iat: now,
        jti: randomBytes(8).toString('hex'),
        access: actions.length === 0 ? [] : [{ type: 'repository', name: repository, actions }],
      }),
    )
    const signature = sign('RSA-SHA256', Buffer.from(`${header}.${claims}`), key)
    return `${header}.${claims}.${b64url(signature)}`
  }
  const requests: TokenServer['requests'] = []
  const server = http.createServer((req, res) => {
    const url = new URL(req.url as string, 'http://x')
    const scope = url.searchParams.get('scope')
    const auth = req.headers.authorization ?? ''
    const [user, password] = auth.startsWith('Basic ') ? Buffer.from(auth.slice(6), 'base64').toString().split(':') : []
    const authorized = user !== undefined && Object.hasOwn(users, user) && users[user] === password
    requests.push({ authorized, scope })
    if (auth !== '' && !authorized) {
      res.writeHead(401)
      return res.end()
    }
    // Anonymous callers get a token without access, as public token services do.
    const [, repository = '', wanted = ''] = scope?.split(':') ?? []
    res.writeHead(200, { 'content-type': 'application/json' })
    res.end(JSON.stringify({ token: token(repository, authorized ? wanted.split(',') : []) }))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as { port: number }).port
  return {
    realm: `http://127.0.0.1:${port}/token`,
    service,
    issuer,
    certFile,
    requests,
    token,
    close: () => server.close(),
  }
}
