/**
 * sb.extendTtl(ms) and sb.setIdleTimeout(ms) after create, enforced by the sandbox's
 * agent (so also for a detached sandbox with no host left) and seen by every client.
 * Timers here only let time pass; what is checked is always the sandbox's own state or event.
 * (Issue 31.)
 */
import { execFile, spawn } from 'node:child_process'
import { once } from 'node:events'
import path from 'node:path'
import v8 from 'node:v8'
import vm from 'node:vm'
import { describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import { runtimeState } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { runtimesClosedAfterAll, sleep } from '../helpers/runtime.js'

const runtime = runtimesClosedAfterAll()
const CHILD = path.resolve('test/fixtures/lifetime-child.ts')
const CREATOR = path.resolve('test/fixtures/runtime-child.ts')

/** The attaching process: what it sees after attaching (and extending, when asked). */
function attachFromAnotherProcess(stateDir: string, args: Record<string, unknown>): Promise<Record<string, any>> {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      ['--import', 'tsx', CHILD, stateDir, JSON.stringify(args)],
      { timeout: 60_000 },
      (err, stdout, stderr) => {
        if (err) return reject(new Error(`${err.message}\n${stderr}`))
        resolve(JSON.parse(stdout.trim().split('\n').pop()!))
      },
    )
  })
}

async function errorOf(p: Promise<unknown> | (() => unknown)): Promise<SandboxError> {
  try {
    await (typeof p === 'function' ? p() : p)
  } catch (e) {
    expect(e).toBeInstanceOf(SandboxError)
    return e as SandboxError
  }
  throw new Error('no error')
}

/** Lets time pass until the wall clock is past `at` (the sandbox is not what this waits on). */
async function passTime(at: number): Promise<void> {
  while (Date.now() <= at) await sleep(Math.max(10, at - Date.now() + 1))
}

describe('extendTtl', () => {
  it('an extended sandbox outlives its old deadline, then ends at the new one by its own TTL', async () => {
    const sb = await runtime().create({ ttlMs: 1500 })
    const old = sb.expiresAt!
    const destroyed = once(sb, 'destroyed')
    const { expiresAt } = await sb.extendTtl(3000)
    expect(expiresAt).toBe(old + 3000)
    expect(sb.expiresAt).toBe(expiresAt)
    await passTime(old + 300)
    expect(sb.status).not.toBe('destroyed')
    expect((await sb.exec('echo', ['alive'])).stdout).toBe('alive\n')
    expect((await sb.info()).expiresAt).toBe(expiresAt)
    const [reason] = await destroyed
    expect(reason).toBe('ttl_expired')
    expect(Date.now()).toBeGreaterThanOrEqual(expiresAt)
  })

  it('64 concurrent extensions all count, each answered with its own step', async () => {
    const sb = await runtime().create({ ttlMs: 600_000 })
    const start = sb.expiresAt!
    const answers = await Promise.all(Array.from({ length: 64 }, () => sb.extendTtl(1000)))
    const deadlines = answers.map((a) => a.expiresAt).sort((a, b) => a - b)
    expect(deadlines).toEqual(Array.from({ length: 64 }, (_, i) => start + (i + 1) * 1000))
    expect((await sb.info()).expiresAt).toBe(start + 64_000)
    expect(sb.expiresAt).toBe(start + 64_000)
    await sb.stop()
  })

  it('10 000 extensions and idle changes on one sandbox: every one counts, host heap flat after GC', async () => {
    v8.setFlagsFromString('--expose-gc')
    const gc = vm.runInNewContext('gc') as () => void
    const heapAfterGc = async () => {
      for (let i = 0; i < 3; i++) {
        gc()
        await new Promise((r) => setImmediate(r))
      }
      return process.memoryUsage().heapUsed
    }
    const sb = await runtime().create({ ttlMs: 600_000, idleTimeoutMs: 600_000 })
    const start = sb.expiresAt!
    const round = async (n: number) => {
      for (let i = 0; i < n; i++) {
        await sb.extendTtl(1)
        await sb.setIdleTimeout(600_000 + (i % 2))
      }
    }
    await round(1000)
    const after1000 = await heapAfterGc()
    await round(9000)
    const after10000 = await heapAfterGc()
    expect((await sb.info()).expiresAt).toBe(start + 10_000)
    expect(sb.expiresAt).toBe(start + 10_000)
    expect(after10000 - after1000).toBeLessThan(2 * 1024 * 1024)
    await sb.stop()
  }, 120_000)

  it('bad values: S001/S003 naming the value; past creation + maxTtlMs: S402; no TTL: S001', async () => {
    const rt = runtime({ maxTtlMs: 60_000 })
    const sb = await rt.create({ ttlMs: 30_000 })
    for (const bad of [0, -5, 1.5, Number.NaN, '1000', 400 * 86_400_000]) {
      const err = await errorOf(() => sb.extendTtl(bad as number))
      expect(['S001', 'S003']).toContain(err.code)
      expect(err.message).toContain('extendTtl ms')
    }
    const over = await errorOf(sb.extendTtl(30_001))
    expect(over.code).toBe('S402')
    expect(over.message).toMatch(
      /extended by 30001 ms .* is over the maximum of \d+, creation \+ the runtime's maxTtlMs/,
    )
    await sb.extendTtl(29_000) // still within the cap
    const noTtl = await rt.create()
    const none = await errorOf(noTtl.extendTtl(1000))
    expect(none.code).toBe('S001')
    expect(none.message).toContain('created without a TTL')
    await Promise.all([sb.stop(), noTtl.stop()])
  })
})

describe('setIdleTimeout', () => {
  it('a longer idle timeout keeps an idle sandbox past its old one; a shorter one ends it by idle_expired', async () => {
    const sb = await runtime().create({ idleTimeoutMs: 1000 })
    const destroyed = once(sb, 'destroyed')
    await sb.setIdleTimeout(60_000)
    expect(sb.idleTimeoutMs).toBe(60_000)
    const since = Date.now()
    await passTime(since + 1500)
    // No call in between: only the agent's idle clock could have ended it.
    expect(sb.status).not.toBe('destroyed')
    expect((await sb.info()).idleTimeoutMs).toBe(60_000)
    await sb.setIdleTimeout(300)
    const [reason] = await destroyed
    expect(reason).toBe('idle_expired')
  })

  it('a 1 ms idle timeout at create: create returns the sandbox (the clock starts once the host has connected), which then ends by idle_expired', async () => {
    // Before, the agent counted from its boot and ended the sandbox inside the handshake (S305).
    const sb = await runtime().create({ idleTimeoutMs: 1 })
    if (sb.status !== 'destroyed') await once(sb, 'destroyed')
    expect(sb.destroyedReason).toBe('idle_expired')
  })

  it('bad values: S001/S003 naming the value; over 7 days: S402', async () => {
    const sb = await runtime().create()
    for (const bad of [-1, 2.5, 'x', null]) {
      const err = await errorOf(() => sb.setIdleTimeout(bad as number))
      expect(['S001', 'S003']).toContain(err.code)
      expect(err.message).toContain('setIdleTimeout ms')
    }
    const over = await errorOf(sb.setIdleTimeout(7 * 86_400_000 + 1))
    expect(over.code).toBe('S402')
    expect(over.message).toContain(`idleTimeoutMs ${7 * 86_400_000 + 1}`)
    await sb.setIdleTimeout(0)
    expect((await sb.info()).idleTimeoutMs).toBe(0)
    await sb.stop()
    expect((await errorOf(sb.extendTtl(1))).code).toBe('S004')
  })
})

describe('other clients see the new deadlines', () => {
  it('a process that attaches sees the extension in its handle, info() and list(); its own extension reaches this handle', async () => {
    const rt = runtime()
    const stateDir = runtimeState(rt).root
    const sb: Sandbox = await rt.create({ ttlMs: 600_000 })
    const { expiresAt } = await sb.extendTtl(5000)
    const seen = await attachFromAnotherProcess(stateDir, { id: sb.id, accessToken: sb.accessToken })
    expect(seen).toEqual({
      attachedExpiresAt: expiresAt,
      extended: null,
      info: { expiresAt, idleTimeoutMs: sb.idleTimeoutMs },
      listed: expiresAt,
    })
    const theirs = await attachFromAnotherProcess(stateDir, {
      id: sb.id,
      accessToken: sb.accessToken,
      extendByMs: 7000,
    })
    expect(theirs.extended).toEqual({ expiresAt: expiresAt + 7000 })
    expect((await sb.info()).expiresAt).toBe(expiresAt + 7000)
    expect(sb.expiresAt).toBe(expiresAt + 7000)
    expect(rt.list().find((l) => l.id === sb.id)?.expiresAt).toBe(expiresAt + 7000)
    await sb.stop()
  })

  it('a detached sandbox whose creator is gone, extended by an attached client, outlives its old deadline and ends by ttl_expired at the new one', async () => {
    const rt = runtime()
    const stateDir = runtimeState(rt).root
    // Its creator is another process, SIGKILLed: the agent alone enforces the TTL from then on.
    const creator = spawn(
      process.execPath,
      ['--import', 'tsx', CREATOR, 'create', stateDir, JSON.stringify({ detached: true, ttlMs: 2500 })],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    )
    const made = await new Promise<{ id: string; accessToken: string }>((resolve, reject) => {
      creator.stdout!.once('data', (d) => resolve(JSON.parse(String(d))))
      creator.once('exit', () => reject(new Error('the creating process exited early')))
    })
    creator.kill('SIGKILL')
    await once(creator, 'exit')
    const attached = await rt.attach(made.id, { accessToken: made.accessToken })
    const old = attached.expiresAt!
    const { expiresAt } = await attached.extendTtl(3000)
    await passTime(old + 500)
    expect(rt.list().map((l) => l.id)).toContain(made.id)
    expect((await attached.exec('echo', ['alive'])).stdout).toBe('alive\n')
    const [reason] = await once(attached, 'destroyed')
    expect(reason).toBe('ttl_expired')
    expect(Date.now()).toBeGreaterThanOrEqual(expiresAt)
    expect(rt.list({ includeHistorical: true }).find((l) => l.id === made.id)?.destroyedReason).toBe('ttl_expired')
  }, 60_000)
})
