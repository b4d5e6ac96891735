/**
 * Issues 15 and 21: the sandbox's limits hold the workload, never the agent. Commands run in a
 * cgroup leaf of their own (memory, pids, cpu) at a lower priority than the agent, so whatever
 * the workload does to its limits, its own command is what dies (reported `oomKilled`), the
 * agent keeps answering. Deadline precision under load is test/timing/deadlines.test.ts.
 */
import { execFileSync } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { cgroupMode, createCgroups } from '../../lib/drivers/cgroups.js'
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

const MiB = 1024 * 1024

async function answers(sb: Sandbox): Promise<void> {
  const r = await sb.exec('echo', ['still here'])
  expect(r.stdout).toBe('still here\n')
}

describe('cpu: a booting sandbox yields to running ones', () => {
  const cpuGroup = process.getuid?.() === 0 && cgroupMode() === 'v1' ? '/sys/fs/cgroup/cpu/krunbox' : null
  it.runIf(cpuGroup !== null)('boots at a tenth of the cpu weight and has the full weight once ready', async () => {
    const id = crypto.randomUUID()
    const groups = await createCgroups(id, { memoryMb: 64, cpus: 1, pidsMax: 16 }, { workloadLeaf: true })
    try {
      const shares = () => fs.readFileSync(path.join(cpuGroup!, id, 'cpu.shares'), 'utf8').trim()
      expect(shares()).toBe('102')
      await groups.booted()
      expect(shares()).toBe('1024')
    } finally {
      await groups.remove()
    }
    const sb = await rt.create({ image: 'base', driver: 'namespace' })
    expect(fs.readFileSync(path.join(cpuGroup!, sb.id, 'cpu.shares'), 'utf8').trim()).toBe('1024')
    await sb.stop()
  })
})

describe('memory: the workload dies, never the agent', () => {
  let sb: Sandbox
  beforeAll(async () => {
    sb = await rt.create({ image: 'base', driver: 'namespace', memoryMb: 128 })
  })

  it('a command the memory limit kills reports oomKilled, and the next one runs', async () => {
    // tail keeps every byte of a newline-free input: it grows until the limit stops it.
    const r = await sb.exec('tail', ['/dev/zero'])
    expect(r.signal).toBe('SIGKILL')
    expect(r.usage?.oomKilled).toBe(true)
    const ok = await sb.exec('true')
    expect(ok.usage?.oomKilled).toBe(false)
    await answers(sb)
  })

  it('survives 50 concurrent yes', async () => {
    const results = await Promise.all(Array.from({ length: 50 }, () => sb.start('yes', [], { timeoutMs: 2000 }).wait()))
    expect(results.map((r) => r.status)).toEqual(Array(50).fill('timed_out'))
    await answers(sb)
  })

  it('survives finished commands holding output, then a workload over the limit', async () => {
    for (let i = 0; i < 16; i++) {
      const r = await sb.exec('head', ['-c', String(8 * MiB), '/dev/zero'], { encoding: 'buffer', maxBuffer: 16 * MiB })
      expect(r.exitCode).toBe(0)
    }
    const r = await sb.exec('tail', ['/dev/zero'])
    expect(r.usage?.oomKilled).toBe(true)
    await answers(sb)
  })

  for (const dir of ['/workspace', '/tmp']) {
    it(`survives ${dir} filled past the memory limit (tmpfs pages count)`, async () => {
      // The disk (1 GiB by default) is larger than the memory: the writer is what the limit kills.
      const r = await sb.exec('dd', ['if=/dev/zero', `of=${dir}/big`, 'bs=1M', 'count=700'])
      expect(r.signal).toBe('SIGKILL')
      expect(r.usage?.oomKilled).toBe(true)
      // The files still hold the workload's memory; the agent, outside it, still removes them.
      await sb.exec('true')
      await sb.fs.rm(`${dir}/big`)
      await answers(sb)
    })
  }
})

describe('pidsMax counts the workload only', () => {
  let sb: Sandbox
  beforeAll(async () => {
    sb = await rt.create({ image: 'base', driver: 'namespace', pidsMax: 8 })
  })

  it('the smallest pidsMax runs a pipeline', async () => {
    const r = await sb.exec('sh', ['-c', 'echo a | cat'])
    expect(r.stdout).toBe('a\n')
  })

  it('allows exactly pidsMax processes, whatever the agent runs', async () => {
    const spawn = (n: number) => sb.exec('sh', ['-c', `for i in $(seq ${n}); do sleep 30 & done; echo spawned; kill 0`])
    const fits = await spawn(7) // the shell and 7 sleeps
    expect(fits.stdout).toBe('spawned\n')
    expect(fits.stderr).toBe('')
    const over = await spawn(8)
    expect(over.stderr).toMatch(/fork/i)
  })

  it('contains a fork bomb', async () => {
    const r = await sb.exec('sh', ['-c', 'f() { f | f & }; while :; do f; done'], { timeoutMs: 5000 })
    expect(r.stderr).toMatch(/can't fork/) // the limit, not the timeout, stopped it
    await answers(sb)
  })
})

describe('commands run below the agent', () => {
  it('commands run below the agent: at nice 10, which they cannot undo, and first in line for the OOM killer', async () => {
    const sb = await rt.create({ image: 'base', driver: 'namespace', memoryMb: 128 })
    const r = await sb.exec('sh', [
      '-c',
      'cut -d" " -f19 /proc/self/stat; cat /proc/self/oom_score_adj; renice -n -10 $$ 2>&1 | grep -q denied && echo refused',
    ])
    expect(r.stdout).toBe('10\n1000\nrefused\n')
  })

  it('a host that runs niced itself still boots sandboxes; commands keep its (lower) priority', () => {
    const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-niced-'))
    try {
      const out = execFileSync(
        'nice',
        ['-n', '15', process.execPath, '--import', 'tsx', path.resolve('test/fixtures/niced-host-child.ts'), stateDir],
        { encoding: 'utf8', timeout: 60_000 },
      )
      expect(JSON.parse(out.trim().split('\n').pop()!)).toEqual({ nice: '15' })
    } finally {
      fs.rmSync(stateDir, { recursive: true, force: true })
    }
  })
})
