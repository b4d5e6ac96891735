/**
 * A sparse file costs the sandbox nothing (`truncate -s 100G`), so it must not
 * become the host's memory or disk. readFile refuses a file over its cap on the announced size,
 * before holding anything (S404, never a RangeError); download refuses one over its cap before
 * writing it, and keeps a sparse file under the cap sparse on the host.
 * (Issue 28, point 5.)
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import v8 from 'node:v8'
import vm from 'node:vm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'

v8.setFlagsFromString('--expose-gc')
const gc = vm.runInNewContext('gc') as () => void
const GIB = 1024 ** 3

let rt: Runtime
let sb: Sandbox
let host: string

beforeAll(async () => {
  rt = testRuntime()
  host = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-sec-sparse-'))
  sb = await rt.create({ image: 'base', driver: 'namespace' })
  await sb.exec('sh', [
    '-c',
    'truncate -s 5G /workspace/five && truncate -s 100G /workspace/hundred && mkdir /workspace/tree && truncate -s 100G /workspace/tree/big',
  ])
  // 256 MiB, sparse but for a marker at 200 MiB.
  await sb.exec('sh', [
    '-c',
    'truncate -s 256M /workspace/small && printf marker | dd of=/workspace/small bs=1 seek=209715200 conv=notrunc 2>/dev/null',
  ])
})

afterAll(async () => {
  await rt.close()
  fs.rmSync(host, { recursive: true, force: true })
})

async function rejection(promise: Promise<unknown>): Promise<SandboxError> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(SandboxError)
  return err as SandboxError
}

describe('fs: sparse files', () => {
  it('fs: readFile of a 5 GiB sparse file is refused (S404) before the host holds any of it', async () => {
    gc()
    const before = process.memoryUsage().rss
    const err = await rejection(sb.fs.readFile('/workspace/five'))
    expect(err.code).toBe('S404')
    expect(err.message).toContain('/workspace/five')
    expect(err.message).toContain(String(5 * GIB))
    gc()
    expect(process.memoryUsage().rss - before).toBeLessThan(48 * 1024 * 1024)
    // A caller may lower the cap; a file under it is read.
    expect((await rejection(sb.fs.readFile('/workspace/small', { maxBytes: 1024 }))).code).toBe('S404')
    expect((await sb.exec('echo', ['still here'])).stdout).toBe('still here\n')
  })

  it('fs: download of a 100 GiB sparse file is refused (S404) and writes nothing', async () => {
    const dest = path.join(host, 'hundred')
    const err = await rejection(sb.fs.download('/workspace/hundred', dest))
    expect(err.code).toBe('S404')
    expect(err.message).toContain('/workspace/hundred')
    expect(fs.readdirSync(host)).toEqual([])
  })

  it('fs: download of a tree holding a 100 GiB sparse file is refused (S404) before the file is written', async () => {
    const dest = path.join(host, 'tree')
    const err = await rejection(sb.fs.download('/workspace/tree', dest))
    expect(err.code).toBe('S404')
    expect(fs.existsSync(path.join(dest, 'big'))).toBe(false)
    expect(fs.readdirSync(dest).filter((n) => n.startsWith('.'))).toEqual([])
  })

  it('fs: a sparse file under the cap arrives whole and stays sparse on the host', async () => {
    const dest = path.join(host, 'small')
    expect(await sb.fs.download('/workspace/small', dest)).toEqual({ bytes: 256 * 1024 * 1024 })
    const st = fs.statSync(dest)
    expect(st.size).toBe(256 * 1024 * 1024)
    expect(st.blocks * 512).toBeLessThan(4 * 1024 * 1024)
    const fd = fs.openSync(dest, 'r')
    const marker = Buffer.alloc(6)
    fs.readSync(fd, marker, 0, 6, 209715200)
    fs.closeSync(fd)
    expect(marker.toString()).toBe('marker')
  })
})
