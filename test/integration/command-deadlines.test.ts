/**
 * long-lived workloads. A command started without a deadline has none (the agent arms
 * no timer: agent/exec_deadline_test.go), exec keeps its default unless told `timeoutMs: null`, and
 * a running command is activity, so the idle timeout never reaps a sandbox under it.
 * (Issue 15.)
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'

let rt: Runtime
beforeAll(() => {
  rt = testRuntime()
})
afterAll(async () => {
  await rt.close()
})

describe('command deadlines', () => {
  let sb: Sandbox
  beforeAll(async () => {
    sb = await rt.create({ image: 'base', driver: 'namespace' })
  })

  it('start() without timeoutMs has no deadline; exec() keeps 60 s unless given null; Infinity is refused', async () => {
    const forever = sb.start('sleep', ['200'])
    const snaps = async (id: string) => (await sb.commands()).find((c) => c.id === id)!
    await expect.poll(async () => (await snaps(forever.id)).status).toBe('running')
    expect((await snaps(forever.id)).timeoutMs).toBeNull()
    const byDefault = await sb.exec('true')
    await sb.exec('true', [], { timeoutMs: null })
    // Infinity is no number of ms: a deadline computed as Infinity must not pass as "none".
    expect(() => sb.start('true', [], { timeoutMs: Infinity })).toThrow(
      expect.objectContaining({ code: 'S001', message: expect.stringContaining('Infinity') }),
    )
    const listed = await sb.commands()
    const timeouts = listed.filter((c) => c.argv[0] === 'true').map((c) => c.timeoutMs)
    expect(timeouts.sort()).toEqual([60_000, null].sort())
    expect(byDefault.success).toBe(true)
    await forever.cancel({ mode: 'force' })
    expect((await forever.wait()).status).toBe('canceled')
  })

  it('a deadline of days is accepted and still reported; a short one still fires', async () => {
    const week = 7 * 24 * 3600_000
    const long = await sb.exec('true', [], { timeoutMs: week })
    expect(long.success).toBe(true)
    const short = await sb.exec('sleep', ['30'], { timeoutMs: 100 })
    expect(short.timedOut).toBe(true)
    expect(() => sb.start('true', [], { timeoutMs: week + 1 })).toThrow(
      expect.objectContaining({ code: 'S003', message: expect.stringContaining(String(week + 1)) }),
    )
  })
})

describe('idle reaping', () => {
  it('a running command is activity: the sandbox outlives its idle timeout while it runs, then is reaped', async () => {
    const sb = await rt.create({ image: 'base', driver: 'namespace', idleTimeoutMs: 1000 })
    const r = await sb.exec('sleep', ['3'], { timeoutMs: null })
    expect(r.exitCode).toBe(0)
    expect(sb.status).not.toBe('destroyed')
    await sb.waitFor('destroyed', { timeoutMs: 30_000 })
    expect(sb.destroyedReason).toBe('idle_expired')
  })
})

describe('seed items (issue 15, point 7)', () => {
  it('list() rows carry metadata and filter by it, also ended ones; a detached sandbox gets a 1 h TTL', async () => {
    const a = await rt.create({ image: 'base', driver: 'namespace', metadata: { team: 'a', job: 'x' }, detached: true })
    const b = await rt.create({ image: 'base', driver: 'namespace', metadata: { team: 'b' } })
    expect(a.expiresAt! - Date.now()).toBeGreaterThan(3_500_000)
    expect(b.expiresAt).toBeNull()
    expect(rt.list({ metadata: { team: 'a' } }).map((r) => r.id)).toEqual([a.id])
    expect(rt.list({ metadata: { team: 'a', job: 'y' } })).toEqual([])
    expect(rt.list().find((r) => r.id === b.id)?.metadata).toEqual({ team: 'b' })
    expect(() => rt.list({ metadata: { 'bad key': 'x' } })).toThrow(expect.objectContaining({ code: 'S007' }))
    await a.stop()
    await b.stop()
    const ended = rt.list({ includeHistorical: true, metadata: { team: 'a' } })
    expect(ended).toMatchObject([
      { id: a.id, status: 'destroyed', destroyedReason: 'user_killed', metadata: { team: 'a', job: 'x' } },
    ])
  })

  it("logs and readLogs take stream 'combined'; a page is 50 chunks unless asked", async () => {
    const sb = await rt.create({ image: 'base', driver: 'namespace' })
    // 120 lines, each flushed on its own, alternating streams: at least 120 chunks.
    const cmd = sb.start('sh', ['-c', 'for i in $(seq 60); do echo o$i; echo e$i >&2; sleep 0.001; done'])
    await cmd.wait()
    const page = await cmd.readLogs({ stream: 'combined' })
    expect(page.data).toHaveLength(50)
    expect(page.hasMore).toBe(true)
    expect(new Set(page.data.map((c) => c.stream))).toEqual(new Set(['stdout', 'stderr']))
    const all: string[] = []
    for await (const chunk of cmd.logs({ stream: 'combined' })) all.push(chunk.data.toString())
    expect(all.join('').match(/[oe]\d+/g)).toHaveLength(120)
    await expect(cmd.readLogs({ stream: 'both' as never })).rejects.toMatchObject({
      code: 'S001',
      message: expect.stringContaining('"both"'),
    })
    await sb.stop()
  })
})
