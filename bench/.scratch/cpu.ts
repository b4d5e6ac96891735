import fs from 'node:fs'
import { Runtime } from '../../lib/runtime.js'
import { processTree } from '../support/procmem.js'
const cpu = (pid: number) => { const s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8'); const f = s.slice(s.lastIndexOf(')') + 2).split(' '); return (Number(f[11]) + Number(f[12])) * 10 }
const rt = new Runtime({ stateDir: '/tmp/bx/state2' })
const sb = await rt.create({ image: 'base', driver: 'namespace', cpus: Number(process.env.CPUS ?? 1) })
const root = rt.state.read(sb.id)!.pid
const BYTES = 512 * 1024 * 1024
for (let r = 0; r < 2; r++) {
  const pids = processTree(root)
  const before = pids.map(cpu), nb = cpu(process.pid)
  let bytes = 0, chunks = 0
  const t0 = performance.now()
  const cmd = sb.start('dd', ['if=/dev/zero', 'bs=65536', 'count=8192'])
  let sizes = new Map<number, number>()
  cmd.on('stdout', (d) => { bytes += d.length; chunks++; sizes.set(d.length, (sizes.get(d.length) ?? 0) + 1) })
  const agentPids = processTree(root)
  const res = await cmd.wait()
  const el = performance.now() - t0
  console.log('MB/s', (bytes / 1e6 / (el / 1000)).toFixed(0), 'elapsed', el.toFixed(0), 'chunks', chunks, [...sizes.entries()].sort((a,b)=>b[1]-a[1]).slice(0,4))
  console.log('node cpu ms', cpu(process.pid) - nb, 'sandbox procs cpu ms', pids.map((p, i) => `${p}:${cpu(p) - before[i]}`).join(' '), 'head cpu', res.usage)
}
await sb.stop(); await rt.close()
