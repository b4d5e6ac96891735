import fs from 'node:fs/promises'
import path from 'node:path'
import { beforeAll, describe, expect, it } from 'vitest'
import type { BuildResult } from '../../lib/images/index.js'
import { runInImage, sharedStore } from './helpers.js'

describe('python preset', () => {
  let image: BuildResult

  beforeAll(async () => {
    image = await sharedStore().build('python')
  }, 240_000)

  it('runs python3 with json and sqlite3', () => {
    const run = runInImage(image.rootfs, ['python3', '-c', 'import json,sqlite3;print(1)'])
    expect(run.stderr).toBe('')
    expect(run.stdout).toBe('1\n')
  })

  it('has a shell too', () => {
    expect(runInImage(image.rootfs, ['/bin/sh', '-c', 'echo ok']).stdout).toBe('ok\n')
  })

  it('ships a byte-compiled standard library', async () => {
    const lib = (await fs.readdir(path.join(image.rootfs, 'usr/lib'))).find((e) => /^python3\.\d+$/.test(e))
    expect(lib).toBeDefined()
    const cached = await fs.readdir(path.join(image.rootfs, 'usr/lib', lib as string, 'json', '__pycache__'))
    expect(cached.some((f) => f.startsWith('decoder.') && f.endsWith('.pyc'))).toBe(true)
    // Importing must not need to write anything: the image is mounted read-only.
    const run = runInImage(image.rootfs, [
      'python3',
      '-c',
      'import json, sqlite3, sys; print(json.__cached__ is not None)',
    ])
    expect(run.stdout).toBe('True\n')
  })

  it('verifies TLS peers against the CA bundle', () => {
    const run = runInImage(image.rootfs, [
      'python3',
      '-c',
      'import ssl; print(len(ssl.create_default_context().get_ca_certs()) > 50)',
    ])
    expect(run.stdout).toBe('True\n')
  })

  it("has Debian's pip", () => {
    const run = runInImage(image.rootfs, ['python3', '-m', 'pip', '--version'])
    expect(run.stderr).toBe('')
    expect(run.stdout).toMatch(/^pip \d+\.\d+/)
  })

  it('records the resolved Debian packages', () => {
    const names = image.manifest.packages.map((p) => p.name)
    expect(names).toEqual(expect.arrayContaining(['python3', 'libpython3-stdlib', 'libsqlite3-0', 'busybox-static']))
    expect(image.manifest.sizeBytes).toBeGreaterThan(30_000_000)
  })
})
