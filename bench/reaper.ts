/**
 * Benchmark (issue 21 item 10): what the per-sandbox reaper costs the host — the time
 * spawnReaper() takes on the caller's thread, beside a bare detached spawn of /bin/true in the
 * same run, and the memory (PSS, what adds up across processes) of a waiting reaper (sh + tail).
 * Reapers here wait on a `sleep` standing in for a sandbox process, in a throwaway state dir.
 *
 * Usage: node --import tsx bench/reaper.ts [--count 50]
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { spawnReaper } from '../lib/reaper.js'
import { processStartTime } from '../lib/state.js'
import { heading, note, row } from './support/report.js'

const { values } = parseArgs({ options: { count: { type: 'string', default: '50' } } })
const count = Number(values.count)
const root = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-bench-reaper-'))
fs.mkdirSync(path.join(root, '.history'))

const standIn = spawn('sleep', ['600'], { stdio: 'ignore' })
await new Promise((r) => standIn.once('spawn', r))
const pid = standIn.pid!
const start = processStartTime(pid)!

const idOf = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`
// A state entry per stand-in sandbox, so each reaper has something to retire.
for (let i = 0; i < count; i++) fs.mkdirSync(path.join(root, idOf(i), 'ctl'), { recursive: true })
let t = performance.now()
for (let i = 0; i < count; i++) {
  spawnReaper({ stateRoot: root, id: idOf(i), pid, pidStartTime: start, ownerPid: null, cgroupDirs: [], history: { name: null, image: 'base', createdAt: Date.now() } })
}
const reaperMs = (performance.now() - t) / count
t = performance.now()
for (let i = 0; i < count; i++) spawn('/bin/true', [], { stdio: 'ignore', detached: true }).unref()
const bareMs = (performance.now() - t) / count

/** Processes of the reapers (sh with our $0, and the tail each one waits in), once all are waiting. */
function reaperPss(): { processes: number; pssKiB: number } {
  let processes = 0
  let pssKiB = 0
  for (const p of fs.readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
    try {
      const cmdline = fs.readFileSync(`/proc/${p}/cmdline`, 'utf8')
      const waiting = cmdline.includes(`--pid=${pid}\0`)
      if (!cmdline.includes('krunbox-reaper') && !waiting) continue
      processes++
      pssKiB += Number(/^Pss:\s+(\d+)/m.exec(fs.readFileSync(`/proc/${p}/smaps_rollup`, 'utf8'))![1])
    } catch {}
  }
  return { processes, pssKiB }
}
let seen = reaperPss()
for (let i = 0; i < 100 && seen.processes < 3 * count; i++) {
  await new Promise((r) => setTimeout(r, 50))
  seen = reaperPss()
}

heading(`reaper cost (${count} reapers waiting on one stand-in sandbox process)`)
row('spawnReaper() on the caller thread', `${reaperMs.toFixed(2)} ms each`)
row('baseline: detached spawn of /bin/true', `${bareMs.toFixed(2)} ms each`)
row('PSS of a waiting reaper (sh + timeout + tail)', `${(seen.pssKiB / count).toFixed(0)} KiB (${seen.processes} processes)`)

standIn.kill('SIGKILL')
const deadline = Date.now() + 10_000
while (reaperPss().processes > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50))
const left = fs.readdirSync(root).filter((n) => n.startsWith('0')).length
note(`after the stand-in ended: ${fs.readdirSync(path.join(root, '.history')).length} history lines, ${left} state entries and ${reaperPss().processes} reaper processes left`)
fs.rmSync(root, { recursive: true, force: true })
