/**
 * create({ signal }): an abort ends the wait for a slot, for the image or the boot, and the create
 * rejects with S206 only once nothing of the sandbox is left; a finished create is not affected.
 */
import fs from 'node:fs'
import { describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import { runtimeState } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { processesLeft, runtimesClosedAfterAll } from '../helpers/runtime.js'

const runtime = runtimesClosedAfterAll()

async function rejection(p: Promise<unknown>): Promise<SandboxError> {
  const err = await p.then(
    () => null,
    (e) => e,
  )
  expect(err).toBeInstanceOf(SandboxError)
  return err
}

/** Live entries in the runtime's state directory (its dot-directories hold history, trash, snapshots). */
const liveEntries = (rt: ReturnType<typeof runtime>) =>
  fs.readdirSync(runtimeState(rt).root).filter((n) => !n.startsWith('.'))

describe('create({ signal })', () => {
  it('checks the signal (S001 naming it), and an aborted one creates nothing (S206)', async () => {
    const rt = runtime()
    const bad = await rejection(rt.create({ signal: 'stop' as never }))
    expect(bad.code).toBe('S001')
    expect(bad.message).toContain('signal')
    const err = await rejection(rt.create({ signal: AbortSignal.abort(new Error('changed my mind')) }))
    expect(err.code).toBe('S206')
    expect(err.message).toContain('before it started')
    expect((err.cause as Error).message).toBe('changed my mind')
    expect(rt.liveCount).toBe(0)
    expect(liveEntries(rt)).toEqual([])
    expect(() => rt.pool({ size: 1, signal: new AbortController().signal } as never)).toThrow(
      expect.objectContaining({ code: 'S001' }),
    )
  })

  it('leaves the queue for a slot: the slot goes to the next in line and nothing leaks', async () => {
    const rt = runtime({ maxConcurrentSandboxes: 1, queue: true })
    const first = await rt.create()
    const ac = new AbortController()
    const aborted = rejection(rt.create({ signal: ac.signal }))
    const next = rt.create()
    // Both are queued once their (synchronous) policy checks have run.
    await new Promise((r) => setImmediate(r))
    ac.abort()
    const err = await aborted
    expect(err.code).toBe('S206')
    expect(err.message).toContain('waited for a slot')
    await first.stop()
    const second = await next
    expect(second.status).toBe('ready')
    await second.stop()
    await (await rt.create()).stop()
    expect(rt.liveCount).toBe(0)
  })

  it('64 creates aborted at once, each at its own point: each is ready or S206 with nothing of it left, and the runtime goes on', async () => {
    const rt = runtime({ maxConcurrentSandboxes: 64 })
    const handles: Sandbox[] = []
    // Far above what undoing a boot takes: a create that waited for it instead would show.
    const bootTimeoutMs = 60_000
    const outcomes = await Promise.all(
      Array.from({ length: 64 }, async (_, i) => {
        const ac = new AbortController()
        let abortedAt = 0
        const abort = () => {
          abortedAt = performance.now()
          ac.abort()
        }
        // A quarter before anything is made; the rest 0-15 ms after their entry appears, while they boot.
        if (i % 4 === 0) setImmediate(abort)
        // wait: false hands out the sandbox (its id) once its handle exists; ready() settles after the boot, or its undoing.
        const sb = await rt.create({ wait: false, signal: ac.signal, bootTimeoutMs }).catch((e: SandboxError) => e)
        if (sb instanceof SandboxError) {
          expect(sb.code).toBe('S206')
          return 'aborted before'
        }
        handles.push(sb)
        if (i % 4 !== 0) {
          const entry = `${runtimeState(rt).root}/${sb.id}`
          const watch = setInterval(() => {
            if (!fs.existsSync(entry)) return
            clearInterval(watch)
            setTimeout(abort, i % 16)
          }, 1)
          void sb
            .ready()
            .catch(() => {})
            .finally(() => clearInterval(watch))
        }
        const err = await sb.ready().then(
          () => null,
          (e: SandboxError) => e,
        )
        if (err === null) return 'ready'
        expect(performance.now() - abortedAt).toBeLessThan(bootTimeoutMs / 2)
        expect(err.code).toBe('S206')
        expect(sb.status).toBe('failed')
        expect(await processesLeft(sb.id)).toEqual([])
        expect(liveEntries(rt)).not.toContain(sb.id)
        return err.message.includes('during its boot') ? 'aborted in boot' : 'aborted before'
      }),
    )
    expect(outcomes).toContain('aborted before')
    expect(outcomes).toContain('aborted in boot')
    await Promise.all(handles.filter((sb) => sb.status !== 'failed').map((sb) => sb.stop()))
    expect(rt.liveCount).toBe(0)
    expect(liveEntries(rt)).toEqual([])
    const again = await rt.create()
    expect((await again.exec('echo', ['on'])).stdout).toBe('on\n')
    await again.stop()
  }, 120_000)

  it('rejects a waiting create with S206 once its boot is undone; a finished create ignores a later abort', async () => {
    const rt = runtime()
    const ac = new AbortController()
    let settled = false
    const pending = rt.create({ signal: ac.signal }).finally(() => (settled = true))
    // The boot is under way once the sandbox's entry exists in the state directory.
    while (liveEntries(rt).length === 0 && !settled) await new Promise((r) => setImmediate(r))
    expect(settled).toBe(false)
    const [id] = liveEntries(rt)
    ac.abort()
    const err = await rejection(pending)
    expect(err.code).toBe('S206')
    expect(await processesLeft(id)).toEqual([])
    expect(liveEntries(rt)).toEqual([])

    const done = new AbortController()
    const sb = await rt.create({ signal: done.signal })
    done.abort()
    expect((await sb.exec('echo', ['still here'])).stdout).toBe('still here\n')
    expect(sb.status).not.toBe('failed')
    await sb.stop()
  })

  it('acquire({ signal }) takes from a pool of the same shape (the signal is no part of it) and aborts its fallback create', async () => {
    const rt = runtime({ maxConcurrentSandboxes: 2 })
    const pool = rt.pool({ image: 'base', size: 1 })
    await pool.full()
    const leased = await rt.acquire({ image: 'base', signal: new AbortController().signal })
    expect(pool.stats.ready).toBe(0)
    const ac = new AbortController()
    const fallback = rejection(rt.acquire({ image: 'base', env: { SHAPE: 'other' }, signal: ac.signal }))
    ac.abort()
    expect((await fallback).code).toBe('S206')
    await leased.stop()
    await pool.close()
    expect(rt.liveCount).toBe(0)
  })

  it('close() refuses the creates still queued for a slot and every later one (S206): nothing boots after it', async () => {
    const rt = runtime({ maxConcurrentSandboxes: 1, queue: true })
    const first = await rt.create()
    const queued = Array.from({ length: 8 }, () => rejection(rt.create()))
    await rt.close()
    expect(first.status).toBe('destroyed')
    for (const err of await Promise.all(queued)) {
      expect(err.code).toBe('S206')
      expect(err.message).toContain('runtime was closed')
    }
    expect((await rejection(rt.create())).code).toBe('S206')
    expect(() => rt.pool({ size: 1 })).toThrow(expect.objectContaining({ code: 'S206' }))
    expect(rt.liveCount).toBe(0)
    expect(await processesLeft(first.id)).toEqual([])
  })
})
