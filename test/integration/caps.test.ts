/**
 * Every cap of the Runtime holds under 64 parallel creates: exactly the allowed
 * number succeed and the rest get their code, or wait their turn where queueing was asked for.
 * (Issue 21 item 4.)
 */
import { describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import type { Runtime, RuntimeConfig, CreateOptions } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { runtimesClosedAfterAll } from '../helpers/runtime.js'

const PARALLEL = 64
const runtime = runtimesClosedAfterAll()

/** 64 creates started in the same tick; the outcomes tallied by code. */
async function parallelCreates(
  rt: Runtime,
  options: CreateOptions,
): Promise<{ created: Sandbox[]; codes: Record<string, number> }> {
  const settled = await Promise.allSettled(Array.from({ length: PARALLEL }, () => rt.create(options)))
  const created: Sandbox[] = []
  const codes: Record<string, number> = {}
  for (const s of settled) {
    if (s.status === 'fulfilled') created.push(s.value)
    else {
      expect(s.reason).toBeInstanceOf(SandboxError)
      const code = (s.reason as SandboxError).code
      codes[code] = (codes[code] ?? 0) + 1
    }
  }
  return { created, codes }
}

describe('caps under 64 parallel creates', () => {
  it('maxConcurrentSandboxes: 2 → exactly 2 succeed, 62 get S401; a stop frees a slot', async () => {
    const rt = runtime({ maxConcurrentSandboxes: 2 })
    const { created, codes } = await parallelCreates(rt, { image: 'base' })
    expect(created).toHaveLength(2)
    expect(codes).toEqual({ S401: PARALLEL - 2 })
    expect(rt.liveCount).toBe(2)
    await created[0].stop()
    const again = await parallelCreates(rt, { image: 'base' })
    expect(again.created).toHaveLength(1)
    expect(again.codes).toEqual({ S401: PARALLEL - 1 })
    await Promise.all([created[1].stop(), again.created[0].stop()])
  })

  it('with queue: true all 64 succeed in turn, never more than 2 alive at once', async () => {
    const rt = runtime({ maxConcurrentSandboxes: 2, queue: true })
    // Sampled every few ms and at every create: a slot is taken (liveCount grows) before the boot starts.
    let peak = 0
    const sampler = setInterval(() => (peak = Math.max(peak, rt.liveCount)), 2)
    const results = await Promise.all(
      Array.from({ length: PARALLEL }, async () => {
        const sb = await rt.create({ image: 'base' })
        peak = Math.max(peak, rt.liveCount)
        await sb.stop()
        return sb.status
      }),
    ).finally(() => clearInterval(sampler))
    expect(results.every((s) => s === 'destroyed')).toBe(true)
    expect(peak).toBeLessThanOrEqual(2)
    expect(rt.liveCount).toBe(0)
  }, 180_000)

  it('a create that fails after taking its slot gives it back', async () => {
    const rt = runtime({ maxConcurrentSandboxes: 1, customImages: { broken: '/nonexistent-krunbox-image' } })
    const { created, codes } = await parallelCreates(rt, { image: 'broken' })
    expect(created).toHaveLength(0)
    expect(codes).toEqual({ S104: 1, S401: PARALLEL - 1 })
    const sb = await rt.create({ image: 'base' })
    expect(sb.status).toBe('ready')
    await sb.stop()
  })

  const staticCaps: [string, RuntimeConfig, CreateOptions, string][] = [
    [
      'perImageCaps.maxCpus',
      { perImageCaps: { base: { maxCpus: 1, maxMemoryMb: 1024 } } },
      { image: 'base', cpus: 2 },
      'S400',
    ],
    [
      'perImageCaps.maxMemoryMb',
      { perImageCaps: { base: { maxCpus: 4, maxMemoryMb: 64 } } },
      { image: 'base', memoryMb: 128 },
      'S400',
    ],
    ['maxTtlMs', { maxTtlMs: 5_000 }, { image: 'base', ttlMs: 5_001 }, 'S402'],
    ['imageAllowlist', { imageAllowlist: ['python'] }, { image: 'base' }, 'S100'],
  ]
  for (const [cap, config, options, code] of staticCaps) {
    it(`${cap}: all 64 refused with ${code}, nothing booted`, async () => {
      const rt = runtime(config)
      const { created, codes } = await parallelCreates(rt, options)
      expect(created).toHaveLength(0)
      expect(codes).toEqual({ [code]: PARALLEL })
      expect(rt.liveCount).toBe(0)
    })
  }
})
