/**
 * Benchmark (issue 21 item 10, issue 22): what the per-sandbox reaper costs the host, for
 * krunbox-reaper (native/src/reaper/krunbox_reaper.c) and, as the baseline in the same run, the shell
 * reaper it replaced (the script of lib/reaper.ts at --baseline, read from git; skipped where
 * there is no git history): the time spawnReaper() takes, the tasks, PSS and wake-ups of a
 * waiting reaper, the CPU of a reaper's whole life (start, wait, retiring one entry, exit) and
 * how long after the sandbox ends its entry is gone.
 *
 * Reapers here wait on a `sleep` standing in for a sandbox process, in a throwaway state dir;
 * each entry has an exit record to read. Every reaper leads a session of its own: its tasks are
 * the processes of that session. Its CPU is read from this process's cutime + cstime once the
 * reapers have been reaped (a shell reaper's own children included).
 *
 * Usage: node --import tsx bench/reaper.ts [--count 50] [--baseline efc94ef]
 */
import { execFileSync, spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { loadNative } from '../lib/native.js'
import { spawnReaper, writeReaperParams, type ReaperSpec } from '../lib/reaper.js'
import { processStartTime } from '../lib/state.js'
import { heading, note, row } from './support/report.js'

const { values } = parseArgs({
  options: { count: { type: 'string', default: '50' }, baseline: { type: 'string', default: 'efc94ef' } },
})
const count = Number(values.count)
const TICK_MS = 1000 / 100 // USER_HZ

/** The shell script the reaper was before it became a native process, or null. */
function shellScript(commit: string): string | null {
  let source: string
  try {
    source = execFileSync('git', ['show', `${commit}:lib/reaper.ts`], {
      cwd: path.dirname(import.meta.dirname),
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'ignore'],
    })
  } catch {
    return null
  }
  const m = /const SCRIPT = `([\s\S]*?)`\.replaceAll\('%\{', '\$\{'\)/.exec(source)
  // The template literal as JavaScript read it (its only escapes are \\ pairs).
  return m ? m[1].replaceAll('\\\\', '\\').replaceAll('%{', '${') : null
}

type Start = (spec: ReaperSpec) => Promise<number | null>

async function startShell(script: string, spec: ReaperSpec): Promise<number | null> {
  const params = await writeReaperParams(spec)
  if (params === null) return null
  const native = loadNative()
  const child = await native.spawnAsync({
    file: '/bin/sh',
    args: ['-c', script, 'krunbox-reaper', params],
    env: ['PATH=/usr/sbin:/usr/bin:/sbin:/bin'],
    newSession: true,
  })
  native.watchExit(child.pid, () => {}, { ref: false })
  return child.pid
}

function statFields(pid: number | 'self'): string[] | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  } catch {
    return null
  }
}

/** Processes by session: a reaper's are those of the session it leads. */
function sessions(): Map<number, number[]> {
  const out = new Map<number, number[]>()
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    const f = statFields(Number(name))
    if (!f) continue
    const sid = Number(f[3])
    out.set(sid, [...(out.get(sid) ?? []), Number(name)])
  }
  return out
}

function readNumber(file: string, re: RegExp): number {
  try {
    return Number(re.exec(fs.readFileSync(file, 'utf8'))?.[1] ?? 0)
  } catch {
    return 0
  }
}

interface Tree {
  processes: number
  tasks: number
  pssKiB: number
  switches: number
}

function measure(reapers: number[]): Tree {
  const bySession = sessions()
  const t: Tree = { processes: 0, tasks: 0, pssKiB: 0, switches: 0 }
  for (const r of reapers) {
    for (const p of bySession.get(r) ?? []) {
      t.processes++
      t.tasks += readNumber(`/proc/${p}/status`, /^Threads:\s+(\d+)$/m)
      t.pssKiB += readNumber(`/proc/${p}/smaps_rollup`, /^Pss:\s+(\d+)/m)
      t.switches +=
        readNumber(`/proc/${p}/status`, /^voluntary_ctxt_switches:\s+(\d+)$/m) +
        readNumber(`/proc/${p}/status`, /^nonvoluntary_ctxt_switches:\s+(\d+)$/m)
    }
  }
  return t
}

/** CPU of this process's reaped children so far (cutime + cstime). */
function childrenCpuMs(): number {
  const f = statFields('self')!
  return (Number(f[13]) + Number(f[14])) * TICK_MS
}

const delay = (ms: number) => new Promise((r) => setTimeout(r, ms))

async function eventually(what: string, predicate: () => boolean, timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await delay(20)
  }
}

/** A waiting reaper: native, holding its pidfd; shell, with its `tail --pid` started. */
function waiting(reaper: number, bySession: Map<number, number[]>): boolean {
  for (const p of bySession.get(reaper) ?? []) {
    try {
      if (fs.readFileSync(`/proc/${p}/cmdline`, 'utf8').startsWith('tail\0')) return true
      if (fs.readdirSync(`/proc/${p}/fd`).some((fd) => fs.readlinkSync(`/proc/${p}/fd/${fd}`) === 'anon_inode:[pidfd]'))
        return true
    } catch {}
  }
  return false
}

async function run(label: string, start: Start): Promise<void> {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-bench-reaper-'))
  fs.mkdirSync(path.join(root, '.history'))
  const standIn = spawn('sleep', ['600'], { stdio: 'ignore' })
  await new Promise((r) => standIn.once('spawn', r))
  const pid = standIn.pid!
  const pidStartTime = processStartTime(pid)!
  const idOf = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`
  for (let i = 0; i < count; i++) {
    fs.mkdirSync(path.join(root, idOf(i), 'ctl'), { recursive: true })
    fs.writeFileSync(path.join(root, idOf(i), 'ctl', 'exit.json'), '{"reason":"ttl_expired"}')
  }
  const cpu0 = childrenCpuMs()
  const t0 = performance.now()
  const reapers: number[] = []
  for (let i = 0; i < count; i++) {
    const r = await start({
      stateRoot: root,
      id: idOf(i),
      pid,
      pidStartTime,
      ownerPid: null,
      cgroupDirs: [],
      history: { name: null, image: 'base', createdAt: Date.now() },
    })
    if (r !== null) reapers.push(r)
  }
  const startMs = (performance.now() - t0) / count
  await eventually('every reaper to wait', () => {
    const bySession = sessions()
    return reapers.every((r) => waiting(r, bySession))
  })
  const idle = measure(reapers)
  // The window wake-ups are counted over.
  await delay(2000)
  const wakeups = (measure(reapers).switches - idle.switches) / 2 / count

  const ended = performance.now()
  standIn.kill('SIGKILL')
  await eventually('every entry to go', () => fs.readdirSync(root).every((n) => !n.startsWith('0')))
  const goneMs = performance.now() - ended
  await eventually('every reaper to be reaped', () => reapers.every((r) => statFields(r) === null))
  const cpuMs = (childrenCpuMs() - cpu0) / count
  const history = fs.readdirSync(path.join(root, '.history')).length
  fs.rmSync(root, { recursive: true, force: true })

  heading(`${label}: ${count} reapers waiting on one stand-in sandbox process`)
  row('spawnReaper(), awaited one after another', `${startMs.toFixed(2)} ms each`)
  row('tasks of a waiting reaper', `${(idle.tasks / count).toFixed(1)} (${idle.processes} processes in all)`)
  row('PSS of a waiting reaper', `${(idle.pssKiB / count).toFixed(0)} KiB`)
  row('wake-ups of a waiting reaper', `${wakeups.toFixed(2)} per second`)
  row('CPU of a reaper, start to exit (one entry retired)', `${cpuMs.toFixed(2)} ms`)
  row(`stand-in ended → all ${count} entries gone`, `${goneMs.toFixed(0)} ms (${history} history lines)`)
}

await run('krunbox-reaper', spawnReaper)
const script = shellScript(values.baseline!)
if (script) await run(`baseline: the shell reaper of ${values.baseline}`, (spec) => startShell(script, spec))
else note(`baseline skipped: no lib/reaper.ts shell script at ${values.baseline} (no git history here?)`)
