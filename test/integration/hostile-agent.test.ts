/**
 * A hostile or unlucky agent. The agent is a real process booted by the real
 * namespace driver: test/fixtures/fake-agent (a small Go program, built here) in place of the
 * real agent, misbehaving as each command's name tells it. For every misbehaviour the host
 * process survives (no uncaught exception, no unhandled rejection), the affected call rejects
 * with its documented code, the same connection keeps serving calls, memory stays bounded and a
 * sandbox with the real agent beside it is untouched.
 * (Issue 21, point 3.)
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Readable } from 'node:stream'
import v8 from 'node:v8'
import vm from 'node:vm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { processesLeft, processesMentioning, testRuntime } from '../helpers/runtime.js'

v8.setFlagsFromString('--expose-gc')
const gc = vm.runInNewContext('gc') as () => void

const crashes: unknown[] = []
const onCrash = (err: unknown) => crashes.push(err)

let rt: Runtime
let real: Sandbox
let fake: Sandbox
let buildDir: string

/** Boots a sandbox whose PID 1 is the fake agent. */
async function createFake(): Promise<Sandbox> {
  const before = process.env.KRUNBOX_AGENT_PATH
  process.env.KRUNBOX_AGENT_PATH = path.join(buildDir, 'fake-agent')
  try {
    return await rt.create({ image: 'base', driver: 'namespace' })
  } finally {
    if (before === undefined) delete process.env.KRUNBOX_AGENT_PATH
    else process.env.KRUNBOX_AGENT_PATH = before
  }
}

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
  real = await rt.create({ image: 'base', driver: 'namespace' })
  fake = await createFake()
})

afterAll(async () => {
  await rt?.close()
  fs.rmSync(buildDir, { recursive: true, force: true })
  process.off('uncaughtException', onCrash)
  process.off('unhandledRejection', onCrash)
})

async function codeOf(promise: Promise<unknown>): Promise<string> {
  const err = await promise.then(
    () => null,
    (e) => e,
  )
  expect(err).toBeInstanceOf(SandboxError)
  return (err as SandboxError).code
}

/** The fake's connection still answers, and the real sandbox never noticed. */
async function stillHealthy(): Promise<void> {
  const ok = await fake.exec('ok')
  expect(ok.stdout).toBe('hi\n')
  expect(fake.status).toBe('idle')
  const r = await real.exec('echo', ['fine'])
  expect(r.stdout).toBe('fine\n')
  expect(crashes).toEqual([])
}

describe('a hostile agent', () => {
  it('answers well when it behaves (the baseline of every case below)', async () => {
    await stillHealthy()
  })

  const cases: Array<[string, string, string]> = [
    ['a started event whose command is null', 'null-command', 'S204'],
    ['a started event naming another command', 'foreign-id', 'S204'],
    ['a final answer whose command is null', 'response-null', 'S204'],
    ['an event naming another command after the right one', 'foreign-event', 'S204'],
    ['chunks out of order', 'out-of-order', 'S204'],
    ['a frame over the 4 MiB cap', 'oversized', 'S203'],
    ['a frame of an unknown type', 'unknown-type', 'S204'],
    ['a final answer that is not JSON', 'bad-json', 'S204'],
    ['output past the window it was granted', 'past-window', 'S204'],
  ]
  for (const [what, mode, code] of cases) {
    it(`fails only the one call on ${what} (${code})`, async () => {
      expect(await codeOf(fake.exec(mode))).toBe(code)
      // start() reports the same through wait(); nothing is thrown where no caller holds it.
      expect(await codeOf(fake.start(mode).wait())).toBe(code)
      await stillHealthy()
    })
  }

  it('drops a reply to a request never made and stray frames on the control stream', async () => {
    const r = await fake.exec('stray-reply')
    expect(r.stdout).toBe('hi\n')
    await stillHealthy()
  })

  it('drops frames on a command stream it has finished (a late stdin grant), so the connection and stop() go on', async () => {
    const cmd = fake.start('late-frames', [], { stdin: Readable.from([Buffer.from('in')]) })
    expect(await cmd.wait()).toMatchObject({ status: 'exited', exitCode: 0 })
    await stillHealthy()
  })

  it('keeps memory bounded through a flood of events and output past the window', async () => {
    const floodRounds = async (n: number) => {
      for (let i = 0; i < n; i++) {
        expect((await fake.exec('flood')).stdout).toBe('hi\n')
        expect(await codeOf(fake.exec('past-window'))).toBe('S204')
      }
      // A round trip on the same connection: every frame the flood sent before it has been read
      // and dropped, so what the heap holds now is what the host kept, not what was in flight.
      expect((await fake.exec('ok')).stdout).toBe('hi\n')
      // Buffers are freed by weak callbacks after a collection: a second one, a turn later, counts them.
      gc()
      await new Promise(setImmediate)
      gc()
      return process.memoryUsage()
    }
    // One round first, so that buffers the connection keeps for its life (pools, a grown read
    // buffer) are in the baseline and what is compared is what grows with the rounds.
    const before = await floodRounds(1)
    const after = await floodRounds(6)
    // 240 000 events and 30 MiB of output past the window went by; none of it is kept.
    expect(after.heapUsed - before.heapUsed).toBeLessThan(8 * 1024 * 1024)
    expect(after.arrayBuffers - before.arrayBuffers).toBeLessThan(8 * 1024 * 1024)
    await stillHealthy()
  })

  it('gives up on a command the agent stops answering about: S200 within timeoutMs + killGraceMs + 5 s', async () => {
    const started = Date.now()
    expect(await codeOf(fake.exec('silent', [], { timeoutMs: 500, killGraceMs: 0 }))).toBe('S200')
    const elapsed = Date.now() - started
    expect(elapsed).toBeGreaterThanOrEqual(5_500)
    // The bound is the deadline itself; the slack only absorbs a loaded machine's timer lateness.
    expect(elapsed).toBeLessThan(5_500 + 5_000)
    await stillHealthy()
  })

  it('ends only its own sandbox when the connection breaks mid-frame, and says so in the status', async () => {
    const victim = await createFake()
    const destroyed = new Promise((resolve) => victim.once('destroyed', resolve))
    expect(await codeOf(victim.exec('truncated'))).toBe('S205')
    expect(await destroyed).toBe('crashed')
    expect(victim.status).toBe('destroyed')
    expect(victim.error?.code).toBe('S205')
    expect(await codeOf(victim.exec('ok'))).toBe('S004')
    expect(await processesLeft(victim.id)).toEqual([])
    await stillHealthy()
  })

  it('reports a command the agent never answered about as killed when the sandbox is stopped', async () => {
    const victim = await createFake()
    const pending = victim.exec('silent', [], { timeoutMs: 60_000 })
    const outcome = pending.then(
      (r) => r,
      (e) => e,
    )
    await victim.stop()
    expect(victim.status).toBe('destroyed')
    expect(await processesLeft(victim.id)).toEqual([])
    // Stopping kills every command of the sandbox; the one the agent never reported ends so.
    const result = await outcome
    expect(result).toMatchObject({ status: 'killed', killedReason: 'sandbox_destroyed' })
    await stillHealthy()
  })
})

describe('a stalled real agent', () => {
  it('fails a call with a timeout within its deadline while the agent is SIGSTOPped, and stop() still ends the sandbox', async () => {
    const sb = await rt.create({ image: 'base', driver: 'namespace' })
    const agentPid = processesMentioning(sb.id).find((pid) =>
      fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').startsWith('/krunbox/agent'),
    )
    expect(agentPid).toBeDefined()
    process.kill(agentPid!, 'SIGSTOP')
    try {
      const started = Date.now()
      expect(await codeOf(sb.exec('true', [], { timeoutMs: 500, killGraceMs: 0 }))).toBe('S200')
      expect(Date.now() - started).toBeLessThan(5_500 + 5_000)
      await sb.stop()
      expect(sb.status).toBe('destroyed')
      expect(await processesLeft(sb.id)).toEqual([])
    } finally {
      try {
        process.kill(agentPid!, 'SIGCONT')
      } catch {}
    }
    expect(crashes).toEqual([])
  })
})
