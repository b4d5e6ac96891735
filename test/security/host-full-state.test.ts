/**
 * With the state directory's filesystem full, `krunbox run` aborted (`terminate called
 * after throwing an instance of 'Napi::Error'`, exit 134) and a long-lived create() said S500 "a
 * bug". The host's own writes that the filesystem refuses are S313 naming the path, the CLI exits
 * with its usual error status, and the library's caller gets the error to catch.
 * (Issue 28.)
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { isSandboxError } from '../../lib/errors.js'
import { Runtime } from '../../lib/runtime.js'
import { ensureCliBuilt, krunbox, privateCliEnv } from '../cli/helpers.js'

const root = process.getuid?.() === 0
let mount = ''

beforeAll(async () => {
  if (!root) return
  await ensureCliBuilt()
  mount = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-full-state-'))
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k,mode=0700', 'tmpfs', mount])
  // Fill it: every later write of a file's data fails with ENOSPC (directories still fit).
  const fd = fs.openSync(path.join(mount, 'filler'), 'w')
  try {
    for (;;) fs.writeSync(fd, Buffer.alloc(4096))
  } catch (err) {
    expect((err as NodeJS.ErrnoException).code).toBe('ENOSPC')
  } finally {
    fs.closeSync(fd)
  }
}, 180_000)

afterAll(() => {
  if (!mount) return
  execFileSync('umount', ['-l', mount])
  fs.rmdirSync(mount)
})

describe.skipIf(!root)('state directory on a full filesystem (mounting a tmpfs needs root)', () => {
  it('host process: `krunbox run` with its state directory full is refused with S313 naming the path, not aborted', async () => {
    const { env, home } = privateCliEnv({ XDG_STATE_HOME: mount })
    try {
      const r = await krunbox(['run', 'base', '--', 'echo', 'hi'], { env, timeoutMs: 60_000 })
      expect(r.stderr).not.toContain('terminate called')
      expect(r.signal).toBeNull()
      expect(r.code).not.toBe(134)
      expect(r.code).not.toBe(0)
      expect(r.stderr).toMatch(new RegExp(`S313: ${mount}/krunbox/sandboxes/\\S+: .*ENOSPC`))
      expect(r.stdout).toBe('')
    } finally {
      fs.rmSync(home, { recursive: true, force: true })
    }
  }, 90_000)

  it('host process: `krunbox create` whose token cannot be saved (config directory full) is S313 naming the path, and leaves no sandbox running', async () => {
    const { env, home } = privateCliEnv({ XDG_CONFIG_HOME: path.join(mount, 'config') })
    try {
      const r = await krunbox(['create', 'base'], { env, timeoutMs: 60_000 })
      expect(r.stderr).not.toContain('terminate called')
      expect({ code: r.code, signal: r.signal }).toEqual({ code: 125, signal: null })
      expect(r.stderr).toMatch(new RegExp(`S313: ${mount}/config/krunbox/tokens/\\S+: .*ENOSPC`))
      // The sandbox nobody can attach to was stopped, not left detached until its ttl.
      const listing = await krunbox(['list'], { env })
      expect(listing.stdout.split('\n').slice(1).filter(Boolean)).toEqual([])
    } finally {
      fs.rmSync(home, { recursive: true, force: true })
    }
  }, 90_000)

  it('host process: a library create() on a full state directory rejects with S313 naming the path, and leaves no entry', async () => {
    const stateDir = path.join(mount, 'library')
    const rt = new Runtime({ stateDir })
    try {
      const err = await rt.create({ image: 'base', driver: 'namespace' }).catch((e: unknown) => e)
      expect(isSandboxError(err, 'S313')).toBe(true)
      const details = (err as { details: { path: string; errnoName: string } }).details
      expect(details.errnoName).toBe('ENOSPC')
      expect(details.path.startsWith(stateDir + '/')).toBe(true)
      expect((err as Error).message).toContain(details.path)
      expect(rt.list().filter((s) => s.status !== 'destroyed' && s.status !== 'failed')).toEqual([])
      expect(fs.readdirSync(stateDir).filter((n) => !n.startsWith('.'))).toEqual([])
    } finally {
      await rt.close()
    }
  }, 90_000)
})
