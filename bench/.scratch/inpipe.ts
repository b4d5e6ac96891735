import { Runtime } from '../../lib/runtime.js'
const rt = new Runtime({ stateDir: '/tmp/bx/state3' })
const sb = await rt.create({ image: 'base', driver: 'namespace', cpus: Number(process.env.CPUS ?? 1) })
for (const c of ['head -c 512M /dev/zero | cat >/dev/null', 'head -c 512M /dev/zero >/dev/null', 'grep -i seccomp /proc/self/status; cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us; cat /proc/self/cgroup']) {
  const r = await sb.exec('sh', ['-c', c])
  console.log(c, '=>', r.stdout, r.stderr, r.durationMs, r.usage, r.failReason)
}
await sb.stop(); await rt.close()
