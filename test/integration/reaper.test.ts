/**
 * The reaper of a real sandbox is one task that sleeps while the sandbox idles (no
 * periodic wake-up), names nothing of the sandbox, and goes when the sandbox is stopped.
 * test/native/reaper.test.ts has the reaper's own cases, on stand-in processes.
 * (Issue 22.)
 */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { runtimeState } from '../../lib/runtime.js'
import { runtimesClosedAfterAll, sleep } from '../helpers/runtime.js'
import { processState, until } from '../native/helpers.js'

const runtime = runtimesClosedAfterAll()

/** The pids a process holds pidfds of (fdinfo names each one's process). */
function pidfdTargets(pid: number): number[] {
  const out: number[] = []
  for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
    try {
      if (fs.readlinkSync(`/proc/${pid}/fd/${fd}`) !== 'anon_inode:[pidfd]') continue
      out.push(Number(/^Pid:\s+(-?\d+)$/m.exec(fs.readFileSync(`/proc/${pid}/fdinfo/${fd}`, 'utf8'))![1]))
    } catch {}
  }
  return out
}

/** This process's child that is the reaper waiting on sandbox process `sandboxPid`. */
function reaperOf(sandboxPid: number): number | null {
  for (const task of fs.readdirSync('/proc/self/task')) {
    const children = fs
      .readFileSync(`/proc/self/task/${task}/children`, 'utf8')
      .trim()
      .split(' ')
      .filter(Boolean)
      .map(Number)
    for (const child of children) {
      try {
        if (
          path.basename(fs.readlinkSync(`/proc/${child}/exe`)) === 'krunbox-reaper' &&
          pidfdTargets(child).includes(sandboxPid)
        )
          return child
      } catch {}
    }
  }
  return null
}

/** Context switches so far: they count every time the task woke up. */
function switches(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8')
  return (
    Number(/^voluntary_ctxt_switches:\s+(\d+)$/m.exec(status)![1]) +
    Number(/^nonvoluntary_ctxt_switches:\s+(\d+)$/m.exec(status)![1])
  )
}

describe('the reaper of an idle sandbox', () => {
  it('is one task asleep in poll that never wakes while the sandbox idles, names nothing of it, and ends after stop()', async () => {
    const rt = runtime()
    const sb = await rt.create({ image: 'base', driver: 'namespace' })
    const sandboxPid = JSON.parse(fs.readFileSync(path.join(runtimeState(rt).root, sb.id, 'state.json'), 'utf8'))
      .pid as number
    let reaper: number | null = null
    expect(await until(() => (reaper = reaperOf(sandboxPid)) !== null, 5000)).toBe(true)
    const pid = reaper!
    expect(fs.readdirSync(`/proc/${pid}/task`)).toEqual([String(pid)])
    // It waits on the sandbox process and on its owner, this process.
    expect(pidfdTargets(pid).sort()).toEqual([sandboxPid, process.pid].sort())
    expect(fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8')).not.toContain(sb.id)
    expect(fs.readFileSync(`/proc/${pid}/environ`, 'utf8')).toBe('')

    const before = switches(pid)
    // The window the wake-ups are counted over (a measurement, not a wait for something).
    await sleep(3000)
    expect(switches(pid)).toBe(before)
    expect(processState(pid)).toBe('S')
    const wchan = fs.readFileSync(`/proc/${pid}/wchan`, 'utf8')
    if (wchan !== '0') expect(wchan).toMatch(/poll/)

    await sb.stop()
    expect(await until(() => processState(pid) === null, 5000)).toBe(true)
    expect(fs.existsSync(path.join(runtimeState(rt).root, sb.id))).toBe(false)
    expect(
      JSON.parse(fs.readFileSync(path.join(runtimeState(rt).root, '.history', `${sb.id}.json`), 'utf8')).reason,
    ).toBe('user_killed')
  })
})
