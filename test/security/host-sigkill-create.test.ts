/**
 * A host SIGKILLed part-way through create() left its state entry (no record yet) and
 * the sandbox's cgroups, and no sweep removed them: an entry without a record was taken for a
 * create still booting in another process for 10 minutes, and its cgroups, listed only in the
 * record, were never found. The entry now names the process creating it (pid, start time): a
 * Runtime's sweep removes the half-made entry of a dead creator, with its cgroups found by the
 * id, and leaves that of a live one alone.
 * (Issue 28.)
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { randomUUID } from 'node:crypto'
import { afterAll, describe, expect, it } from 'vitest'
import { cgroupMode } from '../../lib/drivers/cgroups.js'
import { leftoverCgroupDirs } from '../../lib/reaper.js'
import { Runtime } from '../../lib/runtime.js'
import { processStartTime } from '../../lib/state.js'
import { mountsMentioning, processesLeft } from '../helpers/runtime.js'

const CHILD = path.resolve('test/fixtures/runtime-child.ts')
const NODE_TSX = [process.execPath, '--import', 'tsx']
const ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/
const root = process.getuid?.() === 0

const dirs: string[] = []
afterAll(() => {
  for (const dir of dirs) fs.rmSync(dir, { recursive: true, force: true })
})
function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-sigkill-create-'))
  dirs.push(dir)
  return dir
}

const entries = (stateDir: string) => fs.readdirSync(stateDir).filter((n) => ID.test(n))

/** Waits (checking every millisecond) until `ready` holds or the child exits; false if it exited first. */
function until(child: ChildProcess, ready: () => boolean): Promise<boolean> {
  return new Promise((resolve) => {
    const check = () => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve(false)
      if (ready()) return resolve(true)
      setTimeout(check, 1)
    }
    check()
  })
}

/** The moments of a create at which the host is killed. */
const KILL_POINTS = {
  // its entry has just appeared (no cgroups, no process yet)
  entry: (dir: string) => fs.existsSync(dir),
  // its cgroups exist (the record that lists them is not written yet)
  cgroups: (dir: string) => leftoverCgroupDirs(path.basename(dir)).length > 0,
  // the sandbox process has been launched and is booting (its stderr file is open)
  booting: (dir: string) => fs.existsSync(path.join(dir, 'stderr.log')),
} as const

/** One host child creating a sandbox in a state directory of its own, SIGKILLed at `point`. */
async function killDuringCreate(point: keyof typeof KILL_POINTS): Promise<{ stateDir: string; id: string | null }> {
  const stateDir = tempDir()
  const child = spawn(
    NODE_TSX[0],
    [...NODE_TSX.slice(1), CHILD, 'create', stateDir, JSON.stringify({ image: 'base', driver: 'namespace' })],
    { stdio: 'ignore' },
  )
  const exited = new Promise((resolve) => child.once('exit', resolve))
  let id: string | null = null
  const reached = await until(child, () => {
    id ??= entries(stateDir)[0] ?? null
    return id !== null && KILL_POINTS[point](path.join(stateDir, id))
  })
  child.kill('SIGKILL')
  await exited
  expect(reached).toBe(true)
  return { stateDir, id }
}

describe('host SIGKILLed during create()', () => {
  it('host process: 12 SIGKILLs of a creating host (after its entry appears, with its cgroups, while it boots) leave nothing the next Runtime does not sweep', async () => {
    const points = Object.keys(KILL_POINTS) as (keyof typeof KILL_POINTS)[]
    const killed: { stateDir: string; id: string | null }[] = []
    // Three hosts at a time, each point four times.
    for (let round = 0; round < 4; round++) killed.push(...(await Promise.all(points.map((p) => killDuringCreate(p)))))
    const ids = killed.map((k) => k.id).filter((id): id is string => id !== null)
    expect(ids.length).toBe(12)
    for (const { stateDir } of killed) {
      const rt = new Runtime({ stateDir })
      try {
        // A killed host's sandbox process dies by its parent-death signal, a moment later: until
        // then its entry is a live sandbox's. Nothing else may be left once the sweep has run.
        await expect.poll(() => (rt.sweep(), entries(stateDir)), { timeout: 15_000, interval: 100 }).toEqual([])
      } finally {
        await rt.close()
      }
    }
    for (const id of ids) {
      expect(leftoverCgroupDirs(id)).toEqual([])
      expect(await processesLeft(id)).toEqual([])
      expect(mountsMentioning(id)).toEqual([])
    }
  }, 180_000)

  it.skipIf(!root || cgroupMode() === 'none')(
    'host process: the sweep leaves a half-made entry whose creator is alive, and removes it with its cgroups once that process is dead',
    async () => {
      const stateDir = tempDir()
      const rt = new Runtime({ stateDir })
      // A creator that stands for another host process mid-create: alive until killed.
      const creator = spawn('sleep', ['600'], { stdio: 'ignore' })
      const exited = new Promise((resolve) => creator.once('exit', resolve))
      const id = randomUUID()
      const entry = path.join(stateDir, id)
      try {
        const pidns = /\[(\d+)\]/.exec(fs.readlinkSync('/proc/self/ns/pid'))![1]
        fs.mkdirSync(path.join(entry, 'ctl'), { recursive: true })
        fs.mkdirSync(path.join(entry, `.creator-${pidns}-${creator.pid}-${processStartTime(creator.pid!)}`))
        // Its cgroups, as the driver makes them before the record exists.
        const hierarchy = cgroupMode() === 'v2' ? '/sys/fs/cgroup' : '/sys/fs/cgroup/memory'
        fs.mkdirSync(path.join(hierarchy, 'krunbox', id, 'agent'), { recursive: true })
        expect(leftoverCgroupDirs(id)).toEqual([
          path.join(hierarchy, 'krunbox', id, 'agent'),
          path.join(hierarchy, 'krunbox', id),
        ])

        rt.sweep()
        expect(fs.existsSync(entry)).toBe(true)
        expect(leftoverCgroupDirs(id).length).toBe(2)

        creator.kill('SIGKILL')
        await exited
        rt.sweep()
        expect(fs.existsSync(entry)).toBe(false)
        expect(leftoverCgroupDirs(id)).toEqual([])
        // Its history line says it never ran.
        expect(rt.list({ includeHistorical: true }).find((s) => s.id === id)).toBeUndefined()
      } finally {
        creator.kill('SIGKILL')
        for (const dir of leftoverCgroupDirs(id)) spawnSync('rmdir', [dir])
        await rt.close()
      }
    },
    60_000,
  )
})
