/**
 * upload() reads a host path on the sandbox's behalf. Another local user (nobody, via
 * setpriv) who can write the directory of that path plants a symlink to a root-only secret: the
 * host must not read the secret into the sandbox. A FIFO in its place must not block the host.
 * (Issue 28.)
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'

let rt: Runtime
let sb: Sandbox
let shared: string
let secretDir: string

beforeAll(async () => {
  rt = testRuntime()
  shared = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-sec-upload-'))
  fs.chmodSync(shared, 0o1777)
  secretDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-sec-secret-'))
  fs.writeFileSync(path.join(secretDir, 'secret'), 'root only\n', { mode: 0o600 })
  sb = await rt.create({ image: 'base', driver: 'namespace' })
})

afterAll(async () => {
  await rt.close()
  fs.rmSync(shared, { recursive: true, force: true })
  fs.rmSync(secretDir, { recursive: true, force: true })
})

async function rejection(promise: Promise<unknown>): Promise<SandboxError> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(SandboxError)
  return err as SandboxError
}

describe('fs: upload of a host path another user can touch', () => {
  it("fs: upload through another user's symlink to a root-only file is refused (S215); the sandbox never gets it", async () => {
    const link = path.join(shared, 'report.txt')
    execFileSync('setpriv', [
      '--reuid=65534',
      '--regid=65534',
      '--clear-groups',
      'ln',
      '-s',
      path.join(secretDir, 'secret'),
      link,
    ])
    const err = await rejection(sb.fs.upload(link, '/workspace/report.txt'))
    expect(err.code).toBe('S215')
    expect(err.message).toContain(link)
    expect((await sb.exec('ls', ['/workspace/report.txt'])).exitCode).not.toBe(0)
  })

  it('fs: upload of a FIFO is refused (S212) without blocking the host', async () => {
    const fifo = path.join(shared, 'fifo')
    execFileSync('mkfifo', [fifo])
    expect((await rejection(sb.fs.upload(fifo, '/workspace/fifo'))).code).toBe('S212')
  })
})
