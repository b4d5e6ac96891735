/**
 * What the README promises holds. An image added with images.register boots;
 * a running command looked up through another handle (attach) is followed to its end; download
 * failures are SandboxErrors naming the caller's path; stop() after an idle expiry resolves.
 * (Issue 16 point 5.)
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import { Runtime, runtimeState } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'

let rt: Runtime
let sb: Sandbox
const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-promises-'))

beforeAll(async () => {
  rt = testRuntime()
  sb = await rt.create({ image: 'base', driver: 'namespace' })
})
afterAll(async () => {
  await rt.close()
  fs.rmSync(scratch, { recursive: true, force: true })
})

describe('images.register', () => {
  it('an image registered on the runtime boots by its name', async () => {
    const base = await rt.images.resolve('base')
    const tarball = path.join(scratch, 'with-marker.tar')
    // A tarball image: the base rootfs plus one marker file.
    const { execFileSync } = await import('node:child_process')
    const tree = path.join(scratch, 'tree')
    fs.mkdirSync(path.join(tree, 'etc'), { recursive: true })
    fs.writeFileSync(path.join(tree, 'etc', 'registered-marker'), 'registered\n')
    execFileSync('tar', ['-cf', tarball, '-C', base.rootfs, '.'])
    execFileSync('tar', ['-rf', tarball, '-C', tree, './etc/registered-marker'])
    const name = `reg-${process.pid}`
    await rt.images.register(name, tarball)
    try {
      const custom = await rt.create({ image: name, driver: 'namespace' })
      try {
        const r = await custom.exec('cat', ['/etc/registered-marker'])
        expect(r.stdout).toBe('registered\n')
        expect(custom.image).toBe(name)
      } finally {
        await custom.stop()
      }
    } finally {
      await rt.images.remove(name)
    }
  })

  it('a name that is neither a preset, nor configured, nor registered is S101 naming it', async () => {
    await expect(rt.create({ image: 'never-registered-image', driver: 'namespace' })).rejects.toMatchObject({
      code: 'S101',
      message: expect.stringContaining('never-registered-image'),
    })
  })
})

describe('a command looked up through another handle', () => {
  it('sb.command(id) after attach follows a running command: its logs arrive and wait() resolves', async () => {
    const detached = await rt.create({ image: 'base', driver: 'namespace' })
    // A second runtime on the same state directory stands for another process.
    const other = new Runtime({ stateDir: runtimeState(rt).root })
    try {
      const cmd = detached.start('sh', [
        '-c',
        'echo before; while [ ! -e /tmp/go ]; do sleep 0.02; done; echo after; exit 7',
      ])
      await cmd.started()
      const handle = await other.attach(detached.id, { accessToken: detached.accessToken! })
      const seen = await handle.command(cmd.id)
      expect(seen).toBeDefined()
      const logs: string[] = []
      seen!.on('log', (c) => logs.push(c.data.toString()))
      const result = seen!.wait()
      await detached.fs.writeFile('/tmp/go', '')
      const r = await result
      expect(r.exitCode).toBe(7)
      expect(logs.join('')).toContain('after\n')
      expect((await cmd.wait()).exitCode).toBe(7)
    } finally {
      await detached.stop()
      await other.close()
    }
  })
})

describe('download failures are SandboxErrors naming the caller path', () => {
  it('a file into a missing directory: S211 naming the destination, no temp file named', async () => {
    await sb.fs.writeFile('/tmp/d.txt', 'x')
    const dest = path.join(scratch, 'missing-dir', 'd.txt')
    const err = await sb.fs.download('/tmp/d.txt', dest).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(SandboxError)
    expect((err as SandboxError).code).toBe('S211')
    expect((err as SandboxError).message).toContain(dest)
    expect((err as SandboxError).message).not.toContain('.krunbox-')
  })

  it('a file onto an existing directory: S212 naming it, and nothing left beside it', async () => {
    const dest = path.join(scratch, 'a-dir')
    fs.mkdirSync(dest, { recursive: true })
    const err = await sb.fs.download('/tmp/d.txt', dest).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(SandboxError)
    expect((err as SandboxError).code).toBe('S212')
    expect((err as SandboxError).message).toContain(dest)
    expect(fs.readdirSync(scratch).filter((n) => n.includes('.krunbox-'))).toEqual([])
  })

  it('a directory onto an existing file: a SandboxError naming the destination, the file untouched', async () => {
    await sb.fs.mkdir('/tmp/tree/sub', { parents: true })
    const dest = path.join(scratch, 'a-file')
    fs.writeFileSync(dest, 'mine')
    const err = await sb.fs.download('/tmp/tree', dest).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(SandboxError)
    expect((err as SandboxError).message).toContain(dest)
    expect(fs.readFileSync(dest, 'utf8')).toBe('mine')
  })
})

describe('idle expiry of an owned sandbox', () => {
  it('ends it with idle_expired, and stop() afterwards resolves instead of throwing S004', async () => {
    const short = await rt.create({ image: 'base', driver: 'namespace', idleTimeoutMs: 3000 })
    const reason = await new Promise((resolve) => short.once('destroyed', resolve))
    expect(reason).toBe('idle_expired')
    await expect(short.stop()).resolves.toEqual({ sandboxId: short.id, stopped: false })
    expect(short.status).toBe('destroyed')
  })
})
