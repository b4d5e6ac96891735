import fs from 'node:fs'
import { spawn } from 'node:child_process'
import { Runtime } from '../../lib/runtime.js'
const rt = new Runtime({ stateDir: '/tmp/bx/state5' })
const sb = await rt.create({ image: 'base', driver: 'namespace', cpus: 2 })
const bw = rt.state.read(sb.id)!.pid
const agent = Number(fs.readFileSync(`/proc/${bw}/task/${bw}/children`, 'utf8').trim())
console.log('agent', agent, fs.readFileSync(`/proc/${agent}/comm`, 'utf8'))
const perf = spawn('perf', ['record', '-e', 'cpu-clock', '-F', '2000', '-g', '-p', String(agent), '-o', '/tmp/bx/perf.data'], { stdio: 'inherit' })
await new Promise((r) => setTimeout(r, 500))
const BYTES = 2048 * 1024 * 1024
let bytes = 0
const t0 = performance.now()
const cmd = sb.start('dd', ['if=/dev/zero', 'bs=65536', `count=${BYTES / 65536}`])
cmd.on('stdout', (d) => (bytes += d.length))
await cmd.wait()
console.log((bytes / 1e6 / ((performance.now() - t0) / 1000)).toFixed(0), 'MB/s')
perf.kill('SIGINT')
await new Promise((r) => perf.once('exit', r))
await sb.stop(); await rt.close()
