/**
 * A reuse pool's next lease runs under the same agent (PID 1) as the last one, whose commands share
 * its uid. Root in the sandbox tries to leave its mark on PID 1 for the next lease (lower its limits,
 * raise its OOM score, renice its autogroup, reschedule its threads) and to stop or kill the reset
 * while its lease is released (lib/pool-reset.ts, native/src/reset). The next lease of the same
 * sandbox finds PID 1 as it was before the first lease, and the reset completes whatever the lease
 * sends to every process it can see.
 */
import path from 'node:path'
import { afterEach, beforeAll, describe, expect, it } from 'vitest'
import type { CreateOptions } from '../../lib/create-options.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { PoolLeases, staticProgram } from '../helpers/pool-leases.js'
import { runtimesClosedAfterAll } from '../helpers/runtime.js'

const SHAPE: CreateOptions = { image: 'base', capabilities: ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'SETUID', 'SETGID'] }
const runtime = runtimesClosedAfterAll()
let leases: PoolLeases
let probe: Buffer
beforeAll(async () => {
  probe = staticProgram(path.join(import.meta.dirname, 'fixtures/pool-reuse-init-probe.c'))
  const rt = runtime({})
  const pool = rt.pool({ ...SHAPE, size: 1, reuse: true })
  leases = new PoolLeases(rt, pool, SHAPE)
  await pool.full()
}, 60_000)
afterEach(() => leases.stopAll())

async function putProbe(sb: Sandbox): Promise<void> {
  await sb.fs.writeFile('/workspace/.probe', probe, { mode: 0o755 })
}

async function runProbe(sb: Sandbox, ...args: string[]): Promise<string> {
  await putProbe(sb)
  const r = await sb.exec('/workspace/.probe', args)
  expect(r.stderr).toBe('')
  expect(r.exitCode).toBe(0)
  return r.stdout
}

describe('pool reuse and PID 1', () => {
  it("pool reuse: PID 1's limits, OOM score, autogroup, coredump filter and threads' scheduling a lease sets are refused/held", async () => {
    const first = await leases.lease()
    const before = await runProbe(first, 'state')
    const refused = await runProbe(first, 'tamper')
    // Refused: every limit (the agent's saved gid is its own), and each thread's scheduling (it holds
    // capabilities its commands lack).
    for (let r = 0; r < 16; r++)
      expect(refused).toMatch(new RegExp(`^refused: prlimit ${r}: Operation not permitted$`, 'm'))
    for (const call of ['setpriority', 'sched_setaffinity', 'sched_setattr', 'ioprio_set'])
      expect(refused).toMatch(new RegExp(`^refused: ${call} \\d+: Operation not permitted$`, 'm'))
    expect(refused).toMatch(/^refused: \/proc\/\d+\/timerslack_ns: Operation not permitted$/m)
    // Changed (the reset puts them back): what the next lease would otherwise inherit.
    const tampered = await runProbe(first, 'state')
    expect(tampered).toMatch(/oom_score_adj: 1000\n/)
    expect(tampered).toMatch(/autogroup: nice 19\n/)
    expect(tampered).toMatch(/coredump_filter: 0000007f\n/)

    const next = await leases.next(first)
    expect(await runProbe(next, 'state')).toBe(before)
    // What the limits the attack chose would have broken: a file past 1 MiB, 40 processes at once.
    const work = await next.exec('sh', [
      '-c',
      'dd if=/dev/zero of=/tmp/big bs=1M count=4 2>/dev/null && stat -c %s /tmp/big && ' +
        'for i in $(seq 40); do sleep 5 & done; jobs -p | wc -l; kill $(jobs -p)',
    ])
    expect(work).toMatchObject({ exitCode: 0, stdout: '4194304\n40\n' })
  }, 60_000)

  for (const signal of ['STOP', 'KILL'])
    it(`pool reuse: a lease sending SIG${signal} to every process it can see while it is released is held (the reset completes, the member is reused)`, async () => {
      // Three rounds: each stop's reset has its own child entering the sandbox, the attack's target.
      for (let round = 0; round < 3; round++) {
        const sb = await leases.lease()
        await putProbe(sb)
        const attack = sb.start('/workspace/.probe', ['signal-all', signal])
        let said = ''
        for await (const chunk of attack.logs()) if ((said += chunk.data.toString()).includes('looping')) break
        expect(said).toBe('looping\n') // the attack runs
        const failures = leases.pool.stats.resetFailures
        const next = await leases.next(sb)
        expect(leases.pool.stats.resetFailures).toBe(failures)
        const ps = await next.exec('ps', ['-o', 'args'])
        expect(ps.stdout).not.toContain('.probe')
        await next.stop()
      }
    }, 60_000)
})
