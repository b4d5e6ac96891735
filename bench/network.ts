/**
 * Benchmark (issue 18): a sandbox's network through its policy (pasta + the host's proxy),
 * beside the host reaching the same loopback server in the same run:
 * - create → ready with a network policy, beside without;
 * - connect latency: N sequential HTTP requests by busybox wget (one connection each), in the
 *   sandbox through the proxy, beside the same busybox on the host straight to the server;
 * - throughput: one large download the same two ways.
 * - stacks (when both are installed): pasta and slirp4netns joined to a bare network namespace,
 *   start-up, connect latency and throughput to the same server: how pasta was chosen.
 * Every server listens on 127.0.0.1; nothing leaves this machine.
 *
 * Usage: node --import tsx bench/network.ts [--creates 10] [--requests 200] [--mib 256]
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process'
import { promisify } from 'node:util'
import http from 'node:http'
import type net from 'node:net'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { findExecutable } from '../lib/paths.js'
import type { Sandbox } from '../lib/sandbox.js'
import { baseRootfs, benchRuntime } from './support/host.js'
import { heading, note, row } from './support/report.js'
import { mbps, ms, ratio, summarize } from './support/stats.js'

const { values } = parseArgs({ options: { creates: { type: 'string', default: '10' }, requests: { type: 'string', default: '200' }, mib: { type: 'string', default: '256' } } })
const CREATES = Number(values.creates)
const REQUESTS = Number(values.requests)
const BIG = Number(values.mib) * 1024 * 1024
const CHUNK = Buffer.alloc(1024 * 1024, 0x61)
const run = promisify(execFile)

const server = http.createServer((req, res) => {
  if (req.url !== '/big') return res.end('ok\n')
  res.writeHead(200, { 'Content-Length': BIG })
  let left = BIG
  const pump = () => {
    while (left > 0) {
      const n = Math.min(left, CHUNK.length)
      left -= n
      if (!res.write(n === CHUNK.length ? CHUNK : CHUNK.subarray(0, n))) return void res.once('drain', pump)
    }
    res.end()
  }
  pump()
})
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()))
const port = (server.address() as net.AddressInfo).port
const policy = { allow: ['bench.test'], hosts: { 'bench.test': '127.0.0.1' } }
const loop = (url: string) => `i=0; while [ $i -lt ${REQUESTS} ]; do wget -q -O /dev/null ${url} || exit 1; i=$((i+1)); done`

const { rt, dispose } = benchRuntime()
let sb: Sandbox | null = null
try {
  const busybox = path.join(await baseRootfs(rt), 'bin/busybox')
  // Never a synchronous child: the server answering it runs on this event loop.
  const onHost = async (line: string) => {
    const t0 = performance.now()
    await run(busybox, ['sh', '-c', line], { env: { PATH: '/usr/bin:/bin' } })
    return performance.now() - t0
  }
  const inSandbox = async (s: Sandbox, line: string) => {
    const t0 = performance.now()
    const r = await s.exec('sh', ['-c', line], { timeoutMs: 300_000 })
    if (r.exitCode !== 0) throw new Error(`in the sandbox: ${line}: ${r.stderr}`)
    return performance.now() - t0
  }

  heading(`create → ready, namespace driver, base image, ${CREATES} of each, interleaved`)
  for (let i = 0; i < 2; i++) {
    await (await rt.create({ image: 'base', driver: 'namespace' })).stop()
    await (await rt.create({ image: 'base', driver: 'namespace', network: policy })).stop()
  }
  const plain: number[] = []
  const withNet: number[] = []
  for (let i = 0; i < CREATES; i++) {
    for (const [samples, network] of [[plain, false], [withNet, policy]] as const) {
      const t0 = performance.now()
      const s = await rt.create({ image: 'base', driver: 'namespace', network })
      samples.push(performance.now() - t0)
      await s.stop()
    }
  }
  const p = summarize(plain)
  const n = summarize(withNet)
  row('network: false (baseline)', `p50 ${ms(p.p50)}  p95 ${ms(p.p95)}`)
  row('network policy (resolver, proxy, pasta)', `p50 ${ms(n.p50)}  p95 ${ms(n.p95)}  (${ratio(n.p50, p.p50)}, +${ms(n.p50 - p.p50)})`)

  sb = await rt.create({ image: 'base', driver: 'namespace', network: policy })
  heading(`connect latency: ${REQUESTS} sequential wget requests (a new connection each), median of 3`)
  const hostRuns: number[] = []
  const sbRuns: number[] = []
  for (let i = 0; i < 3; i++) {
    hostRuns.push(await onHost(loop(`http://127.0.0.1:${port}/`)))
    sbRuns.push(await inSandbox(sb, loop(`http://bench.test:${port}/`)))
  }
  const hostPer = summarize(hostRuns).p50 / REQUESTS
  const sbPer = summarize(sbRuns).p50 / REQUESTS
  row('host, busybox wget straight to the server (baseline)', `${ms(hostPer)} per request`)
  row('sandbox, through pasta and the proxy', `${ms(sbPer)} per request (${ratio(sbPer, hostPer)}, +${ms(sbPer - hostPer)})`)
  note('each request includes starting wget, the same on both sides')

  heading(`throughput: one ${values.mib} MiB download, median of 3`)
  const hostBig: number[] = []
  const sbBig: number[] = []
  for (let i = 0; i < 3; i++) {
    hostBig.push(mbps(BIG, await onHost(`wget -q -O /dev/null http://127.0.0.1:${port}/big`)))
    sbBig.push(mbps(BIG, await inSandbox(sb, `wget -q -O /dev/null http://bench.test:${port}/big`)))
  }
  const hb = summarize(hostBig).p50
  const sbb = summarize(sbBig).p50
  row('host, straight to the server (baseline)', `${hb.toFixed(0)} MB/s`)
  row('sandbox, through pasta and the proxy', `${sbb.toFixed(0)} MB/s (${((sbb / hb) * 100).toFixed(0)} %)`)
  await sb.stop()
  sb = null

  await stacks(busybox)
} finally {
  if (sb) await sb.stop().catch(() => {})
  await dispose()
  server.close()
}

/**
 * pasta and slirp4netns side by side on a bare network namespace (unshare -Urn): the time from
 * start to a working forward, then the same requests and download. pasta forwards one port of
 * the namespace's loopback to the host's; slirp4netns reaches the host's loopback at 10.0.2.2
 * (all of it: it cannot forward single ports outward, which is the other reason for pasta).
 */
async function stacks(busybox: string): Promise<void> {
  const pasta = findExecutable('pasta')
  const slirp = findExecutable('slirp4netns')
  if (!pasta || !slirp || process.getuid?.() !== 0) {
    note('stacks: skipped (needs pasta, slirp4netns and root; slirp4netns is not installed by the setup)')
    return
  }
  heading('user-mode stacks on a bare network namespace (median of 5 starts)')
  const results: Record<string, { start: number; per: number; mbs: number }> = {}
  const NS_PORT = 8080
  for (const name of ['pasta', 'slirp4netns'] as const) {
    const starts: number[] = []
    let per = 0
    let mbs = 0
    for (let i = 0; i < 5; i++) {
      // The namespace exists once its shell speaks.
      const ns = spawn('unshare', ['-Urn', 'sh', '-c', 'echo in; read x'], { stdio: ['pipe', 'pipe', 'ignore'] })
      await new Promise((resolve) => ns.stdout!.once('data', resolve))
      const target = ns.pid!
      const t0 = performance.now()
      const stack =
        name === 'pasta'
          ? // pasta writes its pid to a real pipe (Node's stdio pipes are sockets, which /dev/stdout cannot open).
            spawn('sh', ['-c', `exec ${pasta} -f -q --runas 0 -t none -u none -U none -T ${NS_PORT}:${port} --pid /dev/stdout ${target} | cat`], { stdio: ['ignore', 'pipe', 'pipe'], detached: true })
          : spawn(slirp, ['--configure', '--mtu=65520', '--ready-fd=1', String(target), 'tap0'], { stdio: ['ignore', 'pipe', 'pipe'] })
      let stderr = ''
      stack.stderr!.on('data', (d) => (stderr += d))
      const up = await new Promise<boolean>((resolve) => {
        stack.stdout!.once('data', () => resolve(true))
        stack.once('exit', () => resolve(false))
      })
      if (!up) {
        end(ns)
        note(`stacks: ${name} exited before it was ready (${stderr.trim().split('\n').pop()}); section skipped`)
        return
      }
      starts.push(performance.now() - t0)
      if (i === 0) {
        const url = name === 'pasta' ? `http://127.0.0.1:${NS_PORT}` : `http://10.0.2.2:${port}`
        const inNs = async (line: string) => {
          const t = performance.now()
          await run('nsenter', ['-t', String(target), '-U', '-n', '--preserve-credentials', busybox, 'sh', '-c', `ip link set lo up; ${line}`])
          return performance.now() - t
        }
        per = (await inNs(loop(`${url}/`))) / REQUESTS
        mbs = mbps(BIG, await inNs(`wget -q -O /dev/null ${url}/big`))
      }
      end(stack)
      end(ns)
    }
    results[name] = { start: summarize(starts).p50, per, mbs }
  }
  for (const [name, r] of Object.entries(results)) row(name, `start ${ms(r.start)}, ${ms(r.per)} per request, ${r.mbs.toFixed(0)} MB/s`)
}

function end(child: ChildProcess): void {
  child.stdin?.end()
  try {
    // The pasta pipeline is a process group of its own.
    process.kill(-child.pid!, 'SIGKILL')
  } catch {
    child.kill('SIGKILL')
  }
}
