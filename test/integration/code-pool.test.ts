/**
 * Pools whose members have their default kernel started (startKernels, issue 42): a lease's
 * first cell finds the kernel running, and with `reuse` the next lease finds a new one, with no
 * state of the last lease's kernel left (the reset ended it; the pool started another).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { CreateOptions } from '../../lib/create-options.js'
import type { SandboxPool } from '../../lib/pool.js'
import { codeImage } from '../helpers/code-image.js'
import { PoolLeases } from '../helpers/pool-leases.js'
import { runtimesClosedAfterAll } from '../helpers/runtime.js'
import { until } from '../native/helpers.js'

const runtime = runtimesClosedAfterAll()
const rt = runtime()
let shape: CreateOptions
let pool: SandboxPool
let leases: PoolLeases
beforeAll(async () => {
  shape = { image: await codeImage(rt), memoryMb: 1024 }
  pool = rt.pool({ ...shape, size: 1, reuse: true, startKernels: ['python'] })
  leases = new PoolLeases(rt, pool, shape)
  await pool.full()
}, 900_000)
afterAll(() => leases?.stopAll())

describe('a pool with started kernels', () => {
  it("a lease's default Python context is running before its first cell; the next lease's kernel is a new one", async () => {
    const first = await leases.lease()
    const [context] = first.codeContexts()
    expect(context).toMatchObject({ language: 'python', isDefault: true, state: 'idle' })
    const defined = await first.runCode('import os\nleft = "by the first lease"\nos.getpid()')
    expect(defined.kernelRestarted).toBe(false)

    const next = await leases.next(first)
    expect(next.codeContexts()).toEqual([expect.objectContaining({ language: 'python', state: 'idle' })])
    const after = await next.runCode('left')
    expect(after.error?.name).toBe('NameError')
    expect(after.kernelRestarted).toBe(false)
    const processes = await next.exec('sh', ['-c', 'ps -o args | grep -c ipykernel_launcher'])
    // One kernel (and the grep's own line): the first lease's is gone.
    expect(Number(processes.stdout.trim())).toBe(2)
    await next.stop()
  })

  it('startKernels that is not a list of languages is refused (S001)', () => {
    expect(() => rt.pool({ image: 'base', size: 0, startKernels: ['cobol'] as never })).toThrow(/startKernels/)
  })

  it("a pool whose image has no kernel stops refilling with the image's error (S224)", async () => {
    const plain = rt.pool({ image: 'base', size: 1, startKernels: ['python'] })
    try {
      expect(await until(() => plain.stats.error !== null, 120_000)).toBe(true)
      expect(plain.stats.error).toMatchObject({ code: 'S224' })
      expect(plain.stats.ready).toBe(0)
    } finally {
      await plain.close()
    }
  })
})
