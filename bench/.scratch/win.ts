import fs from 'node:fs'
import { Runtime } from '../../lib/runtime.js'
const cpu = (pid: number) => { const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8'); const f = s.slice(s.lastIndexOf(')') + 2).split(' '); return (Number(f[11]) + Number(f[12])) * 10 }
const rt = new Runtime({ stateDir: '/tmp/bx/state4' })
const sb = await rt.create({ image: 'base', driver: 'namespace', cpus: Number(process.env.CPUS ?? 1) })
const bw = rt.state.read(sb.id)!.pid; const agent = Number(fs.readFileSync(`/proc/${bw}/task/${bw}/children`, 'utf8').trim()) - 1
const conn = sb.backend!.connection
const BYTES = 512 * 1024 * 1024
let n = 0
async function run(window: number, retainBytes?: number) {
  let bytes = 0
  const a0 = cpu(agent + 1), n0 = cpu(process.pid)
  const t0 = performance.now()
  const s = conn.request('exec.start', { argv: ['dd', 'if=/dev/zero', 'bs=65536', `count=${BYTES / 65536}`], env: {}, timeoutMs: 60000, killGraceMs: 1000, id: `c-w${n++}`, follow: true, stdin: false, window, ...(retainBytes ? { retainBytes } : {}) }, { onOutput: (f) => (bytes += f.data.length) })
  await s.result
  const el = performance.now() - t0
  return `${(bytes / 1e6 / (el / 1000)).toFixed(0)} MB/s agentcpu ${cpu(agent + 1) - a0} nodecpu ${cpu(process.pid) - n0} el ${el.toFixed(0)}`
}
for (let r = 0; r < 3; r++)
  for (const [w, rb] of [[1 << 20, undefined], [4 << 20, undefined], [16 << 20, undefined]] as const) console.log(w >> 20, 'MiB window', rb ?? 'def', await run(w, rb))
await sb.stop(); await rt.close()
