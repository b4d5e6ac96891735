/** The conveniences peers have (stream-and-keep exec, batch writes, text reads, create --json for attach, download parents). (Issue 31.) */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { ensureCliBuilt, krunbox, privateCliEnv } from '../cli/helpers.js'
import { testRuntime } from '../helpers/runtime.js'

let rt: Runtime
let sb: Sandbox
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-conv-'))

beforeAll(async () => {
  rt = testRuntime()
  sb = await rt.create({ image: 'base', driver: 'namespace' })
})
afterAll(async () => {
  await rt.close()
  fs.rmSync(tmp, { recursive: true, force: true })
})

describe('exec({ onStdout, onStderr })', () => {
  it('streams each chunk to the listeners while the result keeps all the output', async () => {
    const seen = { stdout: '', stderr: '' }
    let settled = false
    let heardBeforeSettled = false
    const r = await sb
      .exec('sh', ['-c', 'echo one; echo two; echo err >&2'], {
        onStdout: (d) => {
          seen.stdout += d
          heardBeforeSettled ||= !settled
        },
        onStderr: (d) => (seen.stderr += d),
      })
      .finally(() => (settled = true))
    expect(heardBeforeSettled).toBe(true)
    expect(seen).toEqual({ stdout: 'one\ntwo\n', stderr: 'err\n' })
    expect(r.stdout).toBe('one\ntwo\n')
    expect(r.stderr).toBe('err\n')
  })

  it('a listener that throws does not fail the exec; a listener that is not a function is S001', async () => {
    const r = await sb.exec('echo', ['x'], {
      onStdout: () => {
        throw new Error('listener bug')
      },
    })
    expect(r.stdout).toBe('x\n')
    await expect(sb.exec('echo', ['x'], { onStdout: 'no' as never })).rejects.toMatchObject({
      code: 'S001',
      message: expect.stringContaining('onStdout'),
    })
  })
})

describe('fs conveniences', () => {
  it('writeFiles writes a batch (modes, parents) and readFile turns into its text with String()', async () => {
    const written = await sb.fs.writeFiles([
      { path: '/tmp/batch/a.txt', data: 'alpha', parents: true },
      { path: '/tmp/batch/b.sh', data: Buffer.from('#!/bin/sh\necho beta\n'), mode: 0o755 },
      ...Array.from({ length: 30 }, (_, i) => ({ path: `/tmp/batch/n${i}`, data: String(i) })),
    ])
    expect(written.slice(0, 2)).toEqual([
      { path: '/tmp/batch/a.txt', bytes: 5 },
      { path: '/tmp/batch/b.sh', bytes: 20 },
    ])
    expect(written).toHaveLength(32)
    expect((await sb.exec('/tmp/batch/b.sh')).stdout).toBe('beta\n')
    const file = await sb.fs.readFile('/tmp/batch/a.txt')
    expect(String(file)).toBe('alpha')
    expect(`${file}`).toBe('alpha')
    expect(Object.keys(file).sort()).toEqual(['data', 'mode', 'mtime', 'size'])
    expect(String(await sb.fs.readFile('/tmp/batch/n29'))).toBe('29')
  })

  it("readFile with encoding 'utf8' gives the text in data beside the metadata; a bad encoding is S001 naming it", async () => {
    await sb.fs.writeFile('/tmp/enc.txt', 'héllo\n', { mode: 0o640 })
    const text = await sb.fs.readFile('/tmp/enc.txt', { encoding: 'utf8' })
    expect(text.data).toBe('héllo\n')
    expect({ size: text.size, mode: text.mode }).toEqual({ size: 7, mode: 0o640 })
    expect(String(text)).toBe('héllo\n')
    const bytes = await sb.fs.readFile('/tmp/enc.txt', { encoding: 'buffer' })
    expect(Buffer.isBuffer(bytes.data) && bytes.data.equals(Buffer.from('héllo\n'))).toBe(true)
    await expect(sb.fs.readFile('/tmp/enc.txt', { encoding: 'latin1' as never })).rejects.toMatchObject({
      code: 'S001',
      message: expect.stringContaining('encoding must be one of utf8, buffer, got "latin1"'),
    })
  })

  it('writeFiles refuses bad entries before writing any (S210 naming the entry)', async () => {
    await expect(sb.fs.writeFiles('x' as never)).rejects.toMatchObject({ code: 'S210' })
    await expect(
      sb.fs.writeFiles([
        { path: '/tmp/ok-1', data: 'a' },
        { path: 'relative', data: 'b' },
      ]),
    ).rejects.toMatchObject({ code: 'S210', message: expect.stringContaining('files[1].path') })
    await expect(sb.fs.writeFiles([{ path: '/tmp/ok-2', data: 42 as never }])).rejects.toMatchObject({
      code: 'S210',
      message: expect.stringContaining('files[0].data'),
    })
    await expect(sb.fs.stat('/tmp/ok-1')).rejects.toMatchObject({ code: 'S211' })
  })

  it('download({ parents }) makes the host directories first; without it a missing one is an error', async () => {
    await sb.fs.writeFile('/tmp/dl.txt', 'payload')
    const deep = path.join(tmp, 'a', 'b', 'c', 'dl.txt')
    await expect(sb.fs.download('/tmp/dl.txt', deep)).rejects.toMatchObject({ code: expect.stringMatching(/^S2/) })
    await sb.fs.download('/tmp/dl.txt', deep, { parents: true })
    expect(fs.readFileSync(deep, 'utf8')).toBe('payload')
  })
})

describe('krunbox create --json', () => {
  it('prints the access token, with which another process attaches', async () => {
    await ensureCliBuilt()
    const { home, env } = privateCliEnv()
    const created = await krunbox(['create', 'base', '--json'], { env, timeoutMs: 60_000 })
    expect(created.code).toBe(0)
    const doc = JSON.parse(created.stdout)
    expect(doc.accessToken).toMatch(/\S{16,}/)
    const other = new Runtime({ stateDir: path.join(home, 'state', 'krunbox', 'sandboxes') })
    try {
      const attached = await other.attach(doc.id, { accessToken: doc.accessToken })
      expect((await attached.exec('echo', ['attached'])).stdout).toBe('attached\n')
      await attached.stop()
    } finally {
      await other.close()
      fs.rmSync(home, { recursive: true, force: true })
    }
  }, 90_000)
})
