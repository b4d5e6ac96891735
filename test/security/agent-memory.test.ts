/**
 * The agent's own memory is bounded. 100 commands flooding output at once in a
 * `memoryMb: 512` sandbox took the agent to 846 MiB: every followed stream's credit (4 MiB) of
 * chunks could wait in its write queue, and its cgroup leaf had no limit. The peak is read from
 * the kernel (the agent's VmHWM and its leaf's max_usage_in_bytes), a bound, not a timing.
 * (Issue 28.)
 */
import fs from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AGENT_MEMORY_MB, agentLeafLimitBytes, cgroupMode } from '../../lib/drivers/cgroups.js'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'

const COMMANDS = 100
const BYTES_EACH = 6 * 1024 * 1024
const MIB = 1024 * 1024

let rt: Runtime
let sb: Sandbox

beforeAll(async () => {
  rt = testRuntime()
  sb = await rt.create({ image: 'base', driver: 'namespace', memoryMb: 512 })
})

afterAll(async () => {
  await sb?.stop()
  await rt?.close()
})

/** The agent's host pid: the process of the agent leaf whose command line is the agent's. */
function agentPid(leaf: string): number {
  const pids = fs.readFileSync(`${leaf}/cgroup.procs`, 'utf8').trim().split('\n')
  const pid = pids.find((p) => fs.readFileSync(`/proc/${p}/cmdline`, 'latin1').startsWith('/krunbox/agent'))
  expect(pid, `no agent among ${pids.join(', ')}`).toBeDefined()
  return Number(pid)
}

/** Whether every process of the workload (the agent's spawner thread aside) waits to write a pipe, or to reap its children. */
function everyWriterStuck(workload: string, agent: number): boolean {
  const pids = fs
    .readFileSync(`${workload}/cgroup.procs`, 'utf8')
    .trim()
    .split('\n')
    .filter((p) => p && Number(p) !== agent)
  return pids.every((p) => {
    try {
      return /^(anon_)?pipe_write$|^do_wait$/.test(fs.readFileSync(`/proc/${p}/wchan`, 'utf8'))
    } catch {
      return true // gone
    }
  })
}

/** Blocks this thread (so nothing reads the agent's socket) until `done`, checked every 20 ms, or 60 s. */
function holdHostUntil(done: () => boolean): void {
  const nap = new Int32Array(new SharedArrayBuffer(4))
  const deadline = Date.now() + 60_000
  while (!done() && Date.now() < deadline) Atomics.wait(nap, 0, 0, 20)
}

const peakKb = (pid: number) => Number(/^VmHWM:\s+(\d+) kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1])

describe.skipIf(process.getuid?.() !== 0 || cgroupMode() !== 'v1')(
  'agent memory: a flood of output from 100 commands',
  () => {
    it('agent memory: 100 commands writing 6 MiB each at once is held under the agent leaf bound', async () => {
      const leaf = `/sys/fs/cgroup/memory/krunbox/${sb.id}/agent`
      expect(Number(fs.readFileSync(`${leaf}/memory.limit_in_bytes`, 'utf8'))).toBe(
        agentLeafLimitBytes({ memoryMb: 512, cpus: 1, pidsMax: 0, diskMb: 1024 }),
      )
      const pid = agentPid(leaf)
      const commands = Array.from({ length: COMMANDS }, () => sb.start('sh', ['-c', `yes | head -c ${BYTES_EACH}`]))
      await Promise.all(commands.map((c) => c.started()))
      // The host stops reading (its thread busy here) until every command is stuck on its full
      // pipe or done: the agent then holds all it will ever hold for a host that lags.
      holdHostUntil(() => everyWriterStuck(`/sys/fs/cgroup/memory/krunbox/${sb.id}/workload`, pid))
      const results = await Promise.all(commands.map((c) => c.wait()))
      expect(results.map((r) => r.exitCode)).toEqual(results.map(() => 0))
      // The agent's own peak RSS, and its leaf's (bwrap and the agent), stay inside the agent's
      // budget: retained output (64 MiB), frames queued for the host (8 MiB), the GC's headroom.
      expect(peakKb(pid) / 1024).toBeLessThan(AGENT_MEMORY_MB)
      expect(Number(fs.readFileSync(`${leaf}/memory.max_usage_in_bytes`, 'utf8')) / MIB).toBeLessThan(AGENT_MEMORY_MB)
      // And it still answers.
      expect((await sb.exec('echo', ['alive'])).stdout).toBe('alive\n')
    }, 120_000)
  },
)
