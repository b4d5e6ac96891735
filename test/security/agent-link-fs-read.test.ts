/**
 * The agent link against a hostile agent. test/fixtures/fake-agent is booted
 * by the real namespace driver in place of the agent and answers fs.read as the path tells it:
 * more bytes than the size it announced, a size no Buffer can hold, DATA before its meta, and
 * 64 MiB sent at once past its 4 MiB credit, and chunks of no bytes (which cost no credit). Each fails that one call with a code, nothing of
 * it is kept in the host, and the connection serves on.
 * (Issue 28, point 10.)
 */
import { execFileSync } from 'node:child_process'
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

const crashes: unknown[] = []
const onCrash = (err: unknown) => crashes.push(err)
let rt: Runtime
let fake: Sandbox
let buildDir: string

beforeAll(async () => {
  process.on('uncaughtException', onCrash)
  process.on('unhandledRejection', onCrash)
  buildDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-fake-agent-'))
  execFileSync('go', ['build', '-o', path.join(buildDir, 'fake-agent'), '.'], {
    cwd: path.join(import.meta.dirname, '..', 'fixtures', 'fake-agent'),
    env: { ...process.env, CGO_ENABLED: '0' },
    stdio: 'inherit',
  })
  rt = testRuntime()
  const before = process.env.KRUNBOX_AGENT_PATH
  process.env.KRUNBOX_AGENT_PATH = path.join(buildDir, 'fake-agent')
  try {
    fake = await rt.create({ image: 'base', driver: 'namespace' })
  } finally {
    if (before === undefined) delete process.env.KRUNBOX_AGENT_PATH
    else process.env.KRUNBOX_AGENT_PATH = before
  }
})

afterAll(async () => {
  await rt?.close()
  fs.rmSync(buildDir, { recursive: true, force: true })
  process.off('uncaughtException', onCrash)
  process.off('unhandledRejection', onCrash)
})

async function rejection(promise: Promise<unknown>): Promise<SandboxError> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(SandboxError)
  return err as SandboxError
}

async function stillServes(): Promise<void> {
  expect((await fake.exec('ok')).stdout).toBe('hi\n')
  expect(crashes).toEqual([])
}

describe('agent link: fs.read from a hostile agent', () => {
  it('agent link: a readFile reply larger than its own announced size is refused (S204)', async () => {
    const err = await rejection(fake.fs.readFile('/size-lie'))
    expect(err.code).toBe('S204')
    expect(err.message).toContain('more than the 10')
    await stillServes()
  })

  it('agent link: a readFile announcing 6 GiB is refused on its size before anything is held (S404)', async () => {
    const err = await rejection(fake.fs.readFile('/huge'))
    expect(err.code).toBe('S404')
    expect(err.message).toContain('/huge')
    expect(err.message).toContain(String(6 * 1024 ** 3))
    await stillServes()
  })

  it('agent link: DATA before the meta it must follow is refused (S204)', async () => {
    expect((await rejection(fake.fs.readFile('/data-first'))).code).toBe('S204')
    await stillServes()
  })

  it('agent link: OUTPUT chunks of no bytes, which cost no credit, are refused (S204) instead of queued without bound', async () => {
    expect((await rejection(fake.exec('empty-chunks'))).code).toBe('S204')
    // A logs() reader that takes nothing would have queued every one of them.
    const cmd = fake.start('empty-chunks')
    const logs = cmd.logs()
    expect((await rejection(cmd.wait())).code).toBe('S204')
    await logs.return(undefined)
    await stillServes()
  })

  it('agent link: 64 MiB sent past a 4 MiB credit to a reader that takes nothing is refused (S204) and not kept', async () => {
    gc()
    const before = process.memoryUsage().arrayBuffers
    const { stream } = await fake.fs.createReadStream('/past-credit')
    // The reader takes nothing: only the credit bounds what the host holds.
    const err = await new Promise<unknown>((resolve) => stream.once('error', resolve))
    expect(err).toBeInstanceOf(SandboxError)
    expect((err as SandboxError).code).toBe('S204')
    gc()
    expect(process.memoryUsage().arrayBuffers - before).toBeLessThan(16 * 1024 * 1024)
    await stillServes()
  })
})
