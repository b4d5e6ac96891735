/**
 * The code-interpreter preset's tslab comes from the npm registry npm is configured with, its
 * whole tree pinned by lib/images/tslab-lock.json. A registry (or anything between it and the
 * tarballs' host) that serves other bytes under the pinned versions must get nothing into the
 * image: here a local registry answers every package of the lock with a tarball whose bin/tslab
 * is a script of its own, and the install runs with the host's npm standing in for the image's.
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs/promises'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { isSandboxError } from '../../lib/errors.js'
import { findExecutable } from '../../lib/paths.js'
import { installTslab, TSLAB_VERSION } from '../../lib/images/tslab.js'
import { tempDir } from '../images/helpers.js'
import { filesContaining } from '../helpers/files-containing.js'

const MARKER = `tampered-tslab-${process.pid}`
let work: string
let root: string
let server: http.Server
let savedRetries: string | undefined
const tarballRequests: string[] = []

beforeAll(async () => {
  work = await tempDir('preset-tslab-integrity')
  const src = path.join(work, 'src', 'package')
  await fs.mkdir(path.join(src, 'bin'), { recursive: true })
  await fs.writeFile(path.join(src, 'package.json'), JSON.stringify({ name: 'tslab', version: TSLAB_VERSION }))
  await fs.writeFile(path.join(src, 'bin', 'tslab'), `#!/bin/sh\necho ${MARKER}\n`, { mode: 0o755 })
  const tampered = execFileSync('tar', ['-czf', '-', '-C', path.dirname(src), 'package'])
  const lock = JSON.parse(await fs.readFile('lib/images/tslab-lock.json', 'utf8')) as {
    packages: Record<string, { version?: string }>
  }
  const versions = new Map<string, string>()
  for (const [key, entry] of Object.entries(lock.packages))
    if (entry.version !== undefined) versions.set(key.slice(key.lastIndexOf('node_modules/') + 13), entry.version)
  server = http.createServer((req, res) => {
    const url = decodeURIComponent(req.url ?? '')
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    if (url.endsWith('.tgz')) {
      tarballRequests.push(url)
      return res.writeHead(200).end(tampered)
    }
    const name = url.slice(1)
    const version = versions.get(name)
    if (version === undefined) return res.writeHead(404).end()
    // The packument advertises the tampered bytes' own tarball; only the lock's integrity can refuse it.
    const packument = {
      name,
      'dist-tags': { latest: version },
      versions: { [version]: { name, version, dist: { tarball: `${base}/${name}/-/t-${version}.tgz` } } },
    }
    res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(packument))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  // npm retries every refused tarball for minutes before it exits; the refusal is the same at once.
  savedRetries = process.env.npm_config_fetch_retries
  process.env.npm_config_fetch_retries = '0'
  // A root with the image's Node and npm where installNode puts them: shims to the host's.
  root = path.join(work, 'root')
  const npmCli = path.join(path.dirname(await fs.realpath(findExecutable('npm') as string)), 'npm-cli.js')
  await fs.mkdir(path.join(root, 'usr/local/bin'), { recursive: true })
  await fs.mkdir(path.join(root, 'usr/local/lib/node_modules/npm/bin'), { recursive: true })
  await fs.writeFile(path.join(root, 'usr/local/bin/node'), `#!/bin/sh\nexec ${process.execPath} "$@"\n`, {
    mode: 0o755,
  })
  await fs.writeFile(
    path.join(root, 'usr/local/lib/node_modules/npm/bin/npm-cli.js'),
    `require(${JSON.stringify(npmCli)})\n`,
  )
})

afterAll(async () => {
  if (savedRetries === undefined) delete process.env.npm_config_fetch_retries
  else process.env.npm_config_fetch_retries = savedRetries
  await new Promise((resolve) => server?.close(resolve))
  await fs.rm(work, { recursive: true, force: true })
})

describe('code-interpreter preset: tslab from the npm registry', () => {
  it('a tslab tree whose tarballs do not match the lock is refused with S102 naming tslab, and nothing is installed', async () => {
    const build = path.join(work, 'build')
    await fs.mkdir(build)
    const registry = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`
    const error = await installTslab(root, build, registry).then(
      () => null,
      (err: unknown) => err,
    )
    // The tarballs were served: the refusal is the integrity check's, not a missing download.
    expect(tarballRequests.length).toBeGreaterThan(0)
    expect(isSandboxError(error) && error.code).toBe('S102')
    expect((error as Error).message).toContain(`tslab@${TSLAB_VERSION}`)
    expect((error as Error).message).toMatch(/EINTEGRITY|integrity/)
    expect(await fs.readdir(build)).toEqual([])
    expect(await fs.readdir(path.join(root, 'usr/local/lib/node_modules'))).toEqual(['npm'])
    expect(await fs.readdir(path.join(root, 'usr/local/bin'))).toEqual(['node'])
    expect(await filesContaining(root, MARKER)).toEqual([])
  }, 120_000)
})
