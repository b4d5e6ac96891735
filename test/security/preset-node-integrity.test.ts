/**
 * The node preset's Node comes from the npm registry npm is configured with. A registry (or
 * anything between it and the tarball's host) that serves a node tarball whose bytes do not
 * match the packument's integrity must get nothing into the cache: here a local registry serves
 * a node-linux tarball whose bin/node is a script, with the integrity and shasum of other bytes.
 */
import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import fs from 'node:fs/promises'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { isSandboxError } from '../../lib/errors.js'
import { ImageStore } from '../../lib/images/index.js'
import { nodePackageName } from '../../lib/images/npm-package.js'
import { NODE_LTS } from '../../lib/images/presets.js'
import { cacheEntries, tempDir } from '../images/helpers.js'
import { filesContaining } from '../helpers/files-containing.js'
import { processesLeft } from '../helpers/runtime.js'

const MARKER = `tampered-node-${process.pid}`
let work: string
let server: http.Server
let savedRegistry: string | undefined
const requests: string[] = []

/** An npm package tarball holding `files` under package/. */
async function packageTarball(name: string, files: Record<string, string>): Promise<Buffer> {
  const dir = path.join(
    work,
    `src-${name}-${Object.keys(files).length}-${requests.length}-${Math.random().toString(16).slice(2)}`,
  )
  for (const [file, content] of Object.entries(files)) {
    await fs.mkdir(path.dirname(path.join(dir, 'package', file)), { recursive: true })
    await fs.writeFile(path.join(dir, 'package', file), content, { mode: 0o755 })
  }
  return execFileSync('tar', ['-czf', '-', '-C', dir, 'package'])
}

const sri = (bytes: Buffer) => `sha512-${createHash('sha512').update(bytes).digest('base64')}`
const sha1 = (bytes: Buffer) => createHash('sha1').update(bytes).digest('hex')

beforeAll(async () => {
  work = await tempDir('preset-node-integrity')
  const node = nodePackageName()
  const version = `${NODE_LTS.major}.99.0`
  const honest = await packageTarball(node, { 'bin/node': '#!/bin/sh\necho honest\n' })
  const tampered = await packageTarball(node, { 'bin/node': `#!/bin/sh\necho ${MARKER}\n` })
  const npm = await packageTarball('npm', {
    'bin/npm-cli.js': 'console.log(1)\n',
    'bin/npx-cli.js': 'console.log(1)\n',
  })
  server = http.createServer((req, res) => {
    requests.push(req.url ?? '')
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    const packument = (name: string, v: string, signed: Buffer) => ({
      name,
      versions: {
        [v]: {
          name,
          version: v,
          dist: { integrity: sri(signed), shasum: sha1(signed), tarball: `${base}/${name}/-/${name}-${v}.tgz` },
        },
      },
    })
    if (req.url === `/${node}`)
      return res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify(packument(node, version, honest)))
    if (req.url === '/npm')
      return res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(JSON.stringify(packument('npm', `${NODE_LTS.npmMajor}.0.0`, npm)))
    if (req.url === `/${node}/-/${node}-${version}.tgz`) return res.writeHead(200).end(tampered)
    if (req.url === `/npm/-/npm-${NODE_LTS.npmMajor}.0.0.tgz`) return res.writeHead(200).end(npm)
    res.writeHead(404).end()
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  // npm's configuration names the registry; the build asks npm for it.
  savedRegistry = process.env.npm_config_registry
  process.env.npm_config_registry = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`
})

afterAll(async () => {
  if (savedRegistry === undefined) delete process.env.npm_config_registry
  else process.env.npm_config_registry = savedRegistry
  await new Promise((resolve) => server?.close(resolve))
  await fs.rm(work, { recursive: true, force: true })
})

describe('node preset: the npm registry', () => {
  it('node preset: a node tarball that does not match its integrity is refused and nothing is published', async () => {
    const cacheDir = path.join(work, 'cache')
    const error = await new ImageStore({ cacheDir }).build('node').then(
      () => null,
      (err: unknown) => err,
    )
    // The tarball was served: the refusal is the checksum's, not a missing download.
    expect(requests).toContain(`/${nodePackageName()}/-/${nodePackageName()}-${NODE_LTS.major}.99.0.tgz`)
    expect(isSandboxError(error) && error.code).toBe('S102')
    expect((error as Error).message).toContain('does not match its registry checksum')
    expect(isSandboxError(error) && error.retryable).toBe(false)
    const entries = await cacheEntries(cacheDir)
    expect(entries.images).toEqual([])
    expect(entries.tmp).toEqual([])
    expect(await fs.readdir(path.join(cacheDir, 'names')).catch(() => [])).toEqual([])
    expect(await filesContaining(cacheDir, MARKER)).toEqual([])
    // mmdebstrap, running beside the download, was killed with everything it started, not waited for.
    expect(await processesLeft(cacheDir)).toEqual([])
    const mounts = await fs.readFile('/proc/self/mountinfo', 'utf8')
    expect(mounts).not.toContain(cacheDir)
  }, 300_000)
})
