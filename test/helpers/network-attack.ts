/**
 * What the network attack tests (test/security/network-*.test.ts) share: a host service on
 * 127.0.0.1 that answers with a secret, raw requests to the sandbox's proxy, and the public
 * Debian archive this machine's apt uses, read from its sources at run time.
 */
import fs from 'node:fs'
import http from 'node:http'
import net from 'node:net'
import path from 'node:path'
import { normalizeAddress } from '../../lib/network/address.js'
import type { Sandbox } from '../../lib/sandbox.js'

/** A host service on 127.0.0.1 whose every connection gets `secret` (as an HTTP response, readable raw too). */
export async function secretService(secret: string, host = '127.0.0.1'): Promise<{ port: number; close(): void }> {
  const server = net.createServer((s) => {
    s.on('error', () => {})
    s.end(`HTTP/1.1 200 OK\r\nContent-Length: ${secret.length + 1}\r\nConnection: close\r\n\r\n${secret}\n`)
  })
  await new Promise<void>((resolve) => server.listen(0, host, () => resolve()))
  return { port: (server.address() as net.AddressInfo).port, close: () => server.close() }
}

/**
 * The host services the attacks aim at: a secret one (as above) and a web server answering
 * `web <url>`, both on 127.0.0.1; `webPolicy` lets a sandbox reach the web server, as api.test, only.
 */
export async function hostServices(): Promise<{
  secret: { port: number }
  webPort: number
  webPolicy: { allow: string[]; hosts: Record<string, string>; allowHostLoopback: boolean }
  close(): void
}> {
  const secret = await secretService('SECRET-OF-A-HOST-SERVICE')
  const web = http.createServer((req, res) => res.end(`web ${req.url}\n`))
  await new Promise<void>((resolve) => web.listen(0, '127.0.0.1', () => resolve()))
  const webPort = (web.address() as net.AddressInfo).port
  return {
    secret,
    webPort,
    webPolicy: { allow: [`api.test:${webPort}`], hosts: { 'api.test': '127.0.0.1' }, allowHostLoopback: true },
    close() {
      secret.close()
      web.close()
    },
  }
}

/** Sends `request` as written to the sandbox's proxy (127.0.0.1:3128 inside) with busybox nc; what came back. */
export async function rawToProxy(sb: Sandbox, request: string): Promise<string> {
  // nc -w: after our request, read until the proxy closes (at most 10 s); `timeout` bounds the rest.
  const r = await sb.exec('sh', ['-c', 'printf %s "$REQ" | timeout 20 nc -w 10 127.0.0.1 3128'], {
    timeoutMs: 30_000,
    env: { REQ: request },
  })
  return r.stdout + r.stderr
}

/**
 * Whether the sandbox's relay serves a proxy request for `authority` from the sandbox's own
 * loopback (agent/egress/local.go): localhost, and the loopback or unspecified address in the
 * spellings an IP parser takes (dotted 127/8 and 0.0.0.0, ::1, ::, their IPv4-mapped forms).
 * Every other spelling goes to the host, whose policy refuses the host's loopback.
 */
export function servedInSandbox(authority: string): boolean {
  const host = authority
    .replace(/:\d+$/, '')
    .replace(/^\[|\]$/g, '')
    .toLowerCase()
    .replace(/\.$/, '')
  if (host === 'localhost') return true
  if (!net.isIP(host)) return false
  const a = normalizeAddress(host)!
  return a.family === 'ipv4' ? a.ip.startsWith('127.') || a.ip === '0.0.0.0' : a.ip === '::1' || a.ip === '::'
}

/** What a request for the host's loopback gets: 403 from the host, or 502 from the sandbox's own loopback, where nothing listens on that port. */
export const loopbackRefusal = (authority: string) =>
  servedInSandbox(authority) ? /HTTP\/1\.1 502 / : /HTTP\/1\.1 403 /

export const connectRequest = (authority: string) => `CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`

/**
 * An absolute-form request for `url` through the proxy, with busybox wget (it sends the host as
 * written; nc would half-close first, and the HTTP server drops a half-closed request).
 * The status line, the body, and wget's own error.
 */
export async function absoluteViaProxy(sb: Sandbox, url: string): Promise<string> {
  const r = await sb.exec('sh', ['-c', 'timeout 20 wget -S -O- "$URL" 2>&1'], { timeoutMs: 30_000, env: { URL: url } })
  return r.stdout + r.stderr
}

export interface ArchiveSource {
  /** The archive's host name, as apt's sources name it. */
  host: string
  /** The URI's path (e.g. /debian), without a trailing slash. */
  path: string
  suite: string
}

/**
 * The Debian archive this machine's apt uses: the first source whose suite is this release's
 * codename (deb822 .sources files, then one-line .list files). null when there is none.
 */
export function aptArchive(): ArchiveSource | null {
  const codename = /^VERSION_CODENAME=(.*)$/m.exec(readOr('/etc/os-release'))?.[1]?.replace(/"/g, '')
  if (!codename) return null
  const dir = '/etc/apt/sources.list.d'
  const files = fs.existsSync(dir)
    ? fs
        .readdirSync(dir)
        .sort()
        .map((f) => path.join(dir, f))
    : []
  const candidates: { uri: string; suites: string[] }[] = []
  for (const file of files.filter((f) => f.endsWith('.sources'))) {
    for (const stanza of readOr(file).split(/\n\s*\n/)) {
      const field = (name: string) => new RegExp(`^${name}:\\s*(.+)$`, 'mi').exec(stanza)?.[1].trim().split(/\s+/) ?? []
      if (!field('Types').includes('deb')) continue
      for (const uri of field('URIs')) candidates.push({ uri, suites: field('Suites') })
    }
  }
  for (const file of [...files.filter((f) => f.endsWith('.list')), '/etc/apt/sources.list']) {
    for (const line of readOr(file).split('\n')) {
      const m = /^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)/.exec(line.trim())
      if (m) candidates.push({ uri: m[1], suites: [m[2]] })
    }
  }
  for (const { uri, suites } of candidates) {
    if (!suites.includes(codename)) continue
    const url = new URL(uri)
    if (url.protocol !== 'http:' && url.protocol !== 'https:') continue
    return { host: url.hostname, path: url.pathname.replace(/\/$/, ''), suite: codename }
  }
  return null
}

function readOr(file: string): string {
  try {
    return fs.readFileSync(file, 'utf8')
  } catch {
    return ''
  }
}
