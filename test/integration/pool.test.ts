/** Warm pools — leases never given twice, refill after crashes, caps, list, shrink, host death. (Issue 19.) */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import readline from 'node:readline'
import { describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import { Runtime, runtimeState } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { processesLeft, processesMentioning, runtimesClosedAfterAll } from '../helpers/runtime.js'

const runtime = runtimesClosedAfterAll()

/** Waits for a condition the test cannot get an event for (another process's cleanup), up to 30 s. */
async function eventually(check: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 30_000
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 50))
  }
}

describe('warm pool', () => {
  it('1 000 concurrent acquires: each pooled sandbox goes to one caller only, the rest hit the cap (S401)', async () => {
    const rt = runtime({ maxConcurrentSandboxes: 6 })
    const pool = rt.pool({ image: 'base', size: 6 })
    await pool.full()
    const results = await Promise.allSettled(Array.from({ length: 1000 }, () => rt.acquire({ image: 'base' })))
    const leased = results
      .filter((r): r is PromiseFulfilledResult<Sandbox> => r.status === 'fulfilled')
      .map((r) => r.value)
    const refused = results
      .filter((r) => r.status === 'rejected')
      .map((r) => ((r as PromiseRejectedResult).reason as SandboxError).code)
    expect(leased).toHaveLength(6)
    expect(new Set(leased).size).toBe(6)
    expect(new Set(leased.map((s) => s.id)).size).toBe(6)
    expect(new Set(refused)).toEqual(new Set(['S401']))
    // Each lease works, and no pooled entry is left while all six are out.
    for (const sb of leased) expect((await sb.exec('echo', [sb.id])).stdout).toBe(`${sb.id}\n`)
    expect(rt.list().filter((s) => s.pooled)).toHaveLength(0)
    await Promise.all(leased.map((sb) => sb.stop()))
  })

  it('leases at 8 in flight across refills are all distinct sandboxes; list() marks the waiting ones pooled', async () => {
    const rt = runtime({ maxConcurrentSandboxes: 16 })
    const pool = rt.pool({ image: 'base', size: 4, refillConcurrency: 2 })
    await pool.full()
    const pooledIds = new Set(
      rt
        .list()
        .filter((s) => s.pooled)
        .map((s) => s.id),
    )
    expect(pooledIds.size).toBe(4)
    const seen = new Set<string>()
    let twice = 0
    const worker = async () => {
      for (let i = 0; i < 3; i++) {
        const sb = await rt.acquire({ image: 'base' })
        if (seen.has(sb.id)) twice++
        seen.add(sb.id)
        expect(rt.list().find((s) => s.id === sb.id)?.pooled).toBe(false)
        await sb.stop()
      }
    }
    await Promise.all(Array.from({ length: 8 }, worker))
    expect(twice).toBe(0)
    expect(seen.size).toBe(24)
    expect(pool.stats.leased).toBeGreaterThan(0)
    // Another runtime on the same state directory (as another process would) sees the same pooled ones.
    await pool.full()
    const observer = new Runtime({ stateDir: runtimeState(rt).root })
    const pooledHere = rt
      .list()
      .filter((s) => s.pooled)
      .map((s) => s.id)
      .sort()
    expect(pooledHere).toHaveLength(4)
    expect(
      observer
        .list()
        .filter((s) => s.pooled)
        .map((s) => s.id)
        .sort(),
    ).toEqual(pooledHere)
    await observer.close()
  })

  it('refills after its members crash, and counts them lost', async () => {
    const rt = runtime()
    const pool = rt.pool({ image: 'base', size: 3 })
    await pool.full()
    const before = rt
      .list()
      .filter((s) => s.pooled)
      .map((s) => s.id)
    const lost = new Promise<void>((resolve) => {
      let n = 0
      pool.on('lost', () => ++n === 2 && resolve())
    })
    for (const id of before.slice(0, 2)) process.kill(runtimeState(rt).read(id)!.pid, 'SIGKILL')
    await lost
    await pool.full()
    const after = rt
      .list()
      .filter((s) => s.pooled)
      .map((s) => s.id)
    expect(after).toHaveLength(3)
    expect(after).toContain(before[2])
    expect(after.filter((id) => before.includes(id))).toHaveLength(1)
    expect(pool.stats.lost).toBe(2)
    const sb = await rt.acquire({ image: 'base' })
    expect((await sb.exec('true')).exitCode).toBe(0)
    await sb.stop()
  })

  it('members count against maxConcurrentSandboxes; a shape that matches no pool is created normally; shrink and close stop members', async () => {
    const rt = runtime({ maxConcurrentSandboxes: 3 })
    const pool = rt.pool({ image: 'base', size: 3 })
    await pool.full()
    expect(rt.liveCount).toBe(3)
    await expect(rt.create({ image: 'base' })).rejects.toMatchObject({ code: 'S401' })
    await pool.resize(1)
    expect(pool.stats.ready).toBe(1)
    expect(rt.liveCount).toBe(1)
    const other = await rt.acquire({ image: 'base', env: { SHAPE: 'other' } })
    expect(pool.stats.ready).toBe(1) // not taken from the pool: another shape
    expect((await other.exec('sh', ['-c', 'echo $SHAPE'])).stdout).toBe('other\n')
    await other.stop()
    const ids = rt
      .list()
      .filter((s) => s.pooled)
      .map((s) => s.id)
    await pool.close()
    expect(rt.liveCount).toBe(0)
    for (const id of ids) expect(await processesLeft(id)).toEqual([])
  })

  it('validates pool options with codes', () => {
    const rt = runtime()
    expect(() => rt.pool({ image: 'base' } as never)).toThrow(expect.objectContaining({ code: 'S001' }))
    expect(() => rt.pool({ image: 'base', size: -1 })).toThrow(expect.objectContaining({ code: 'S003' }))
    expect(() => rt.pool({ image: 'base', size: 1, detached: true })).toThrow(expect.objectContaining({ code: 'S001' }))
    expect(() => rt.pool({ image: 'base', size: 1, bogus: 1 } as never)).toThrow(
      expect.objectContaining({ code: 'S001' }),
    )
    expect(() => runtime({ pools: 'x' } as never)).toThrow(expect.objectContaining({ code: 'S103' }))
  })

  it('SIGKILL of the host leaves no pooled sandbox and no snapshot staging directory behind', async () => {
    const stateDir = fs.mkdtempSync('/tmp/kb-pool-kill-')
    const child = spawn(process.execPath, ['--import', 'tsx', path.resolve('test/fixtures/pool-child.ts'), stateDir], {
      stdio: ['ignore', 'pipe', 'inherit'],
    })
    const lines = readline.createInterface({ input: child.stdout! })
    const messages: Record<string, unknown>[] = []
    const staged = new Promise<void>((resolve, reject) => {
      lines.on('line', (line) => {
        messages.push(JSON.parse(line))
        if ('staging' in messages[messages.length - 1]) resolve()
      })
      child.once('exit', () => reject(new Error(`child exited early: ${JSON.stringify(messages)}`)))
    })
    await staged
    const pooled = messages[0].pooled as string[]
    const { staging, leased } = messages[1] as { staging: string; leased: string }
    expect(pooled).toHaveLength(3)
    expect(fs.existsSync(staging)).toBe(true)
    child.kill('SIGKILL')
    const ids = [...pooled, leased]
    await eventually(() => ids.every((id) => processesMentioning(id).length === 0), 'the sandboxes to end')
    await eventually(
      () => ids.every((id) => !fs.existsSync(path.join(stateDir, id))),
      'the reapers to remove the state',
    )
    expect(fs.existsSync(staging)).toBe(false)
    const snapshots = path.join(stateDir, '.snapshots')
    expect(fs.existsSync(snapshots) ? fs.readdirSync(snapshots).filter((n) => !n.startsWith('.')) : []).toEqual([])
    fs.rmSync(stateDir, { recursive: true, force: true })
  })
})
