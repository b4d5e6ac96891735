/**
 * Benchmark (issues 18, 34): a sandbox's network through its policy (the host's proxy on the
 * listener the sandbox's relay handed over, the resolver through the relay; a detached sandbox's
 * proxy connections through the relay to the keeper), beside the same without a policy or the
 * host reaching the same loopback server directly, in the same run:
 * - create → ready with a network policy, beside without; the same for detached sandboxes
 *   (their host side lives in the state directory's one keeper);
 * - memory per sandbox: PSS of the sandboxes' process trees with and without a policy, and
 *   the host process's RSS growth per sandbox;
 * - connect latency: N sequential HTTP requests by busybox wget (one connection each), in the
 *   sandbox through the proxy, beside the same busybox on the host straight to the server, in
 *   10 rounds back to back (the target is the median of the rounds' ratios);
 *   again with 20 000 idle TCP sockets open on the host (the proxy no longer reads the host's
 *   TCP table per connection);
 * - the host's proxy alone: a client process sending N sequential requests (a new connection
 *   each) to the same policy's proxy through a unix socket, beside the same client straight to
 *   the server;
 * - throughput: one large download the same two ways.
 * Every server listens on 127.0.0.1; nothing leaves this machine.
 *
 * Usage: node --import tsx bench/network.ts [--creates 10] [--requests 200] [--mib 256] [--sandboxes 8] [--idle-sockets 20000]
 */
import { execFile, spawn } from 'node:child_process'
import { promisify } from 'node:util'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { SandboxNetwork } from '../lib/network/gateway.js'
import { parseNetworkOption } from '../lib/network/policy.js'
import { runtimeState } from '../lib/runtime.js'
import type { Sandbox } from '../lib/sandbox.js'
import { baseRootfs, benchRuntime, sleep } from './support/host.js'
import { processChildren, treeMemory } from './support/procmem.js'
import { heading, note, row, target } from './support/report.js'
import { mbps, median, mib, ms, ratio, summarize } from './support/stats.js'

const { values } = parseArgs({
  options: {
    creates: { type: 'string', default: '10' },
    requests: { type: 'string', default: '200' },
    mib: { type: 'string', default: '256' },
    sandboxes: { type: 'string', default: '8' },
    'idle-sockets': { type: 'string', default: '20000' },
  },
})
const CREATES = Number(values.creates)
const REQUESTS = Number(values.requests)
const BIG = Number(values.mib) * 1024 * 1024
const SANDBOXES = Number(values.sandboxes)
const IDLE_SOCKETS = Number(values['idle-sockets'])
const run = promisify(execFile)

// The server is a process of its own: sharing this event loop with the proxy would charge the
// proxied requests for the server's work and the direct ones for the proxy's.
const server = spawn(
  process.execPath,
  [
    '-e',
    `const BIG = ${BIG}
    const CHUNK = Buffer.alloc(1024 * 1024, 0x61)
    const s = require('http').createServer((req, res) => {
      if (req.url !== '/big') return res.end('ok\\n')
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
    s.listen(0, '127.0.0.1', () => console.log(s.address().port))
    process.stdin.resume(); process.stdin.on('end', () => process.exit(0))`,
  ],
  { stdio: ['pipe', 'pipe', 'inherit'] },
)
const port = Number(
  await new Promise<string>((resolve) => server.stdout!.once('data', (d) => resolve(String(d).trim()))),
)
const policy = { allow: [`bench.test:${port}`], hosts: { 'bench.test': '127.0.0.1' }, allowHostLoopback: true }
const loop = (url: string, count = REQUESTS) =>
  `i=0; while [ $i -lt ${count} ]; do wget -q -O /dev/null ${url} || exit 1; i=$((i+1)); done`

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
    for (const [samples, network] of [
      [plain, false],
      [withNet, policy],
    ] as const) {
      const t0 = performance.now()
      const s = await rt.create({ image: 'base', driver: 'namespace', network })
      samples.push(performance.now() - t0)
      await s.stop()
    }
  }
  const p = summarize(plain)
  const n = summarize(withNet)
  row('network: false (baseline)', `p50 ${ms(p.p50)}  p95 ${ms(p.p95)}`)
  row(
    'network policy (handoff, relay, resolver, proxy)',
    `p50 ${ms(n.p50)}  p95 ${ms(n.p95)}  (${ratio(n.p50, p.p50)}, +${ms(n.p50 - p.p50)})`,
  )
  // Each pair ran back to back: the median of their differences drifts less with the machine's load.
  const added = median(withNet.map((t, i) => t - plain[i]))
  row('added by a policy, median of the pairs', `${ms(added)}`)
  target('a policy adds ≤ 2 ms to create → ready (median of the pairs)', ms(added), added <= 2)

  heading(`create → ready, detached, ${CREATES} of each, interleaved (the keeper already running)`)
  const first = performance.now()
  const firstDetached = await rt.create({ image: 'base', driver: 'namespace', network: policy, detached: true })
  const firstMs = performance.now() - first
  const detachedPlain: number[] = []
  const detachedNet: number[] = []
  for (let i = 0; i < CREATES; i++) {
    for (const [samples, network] of [
      [detachedPlain, false],
      [detachedNet, policy],
    ] as const) {
      const t0 = performance.now()
      const s = await rt.create({ image: 'base', driver: 'namespace', network, detached: true })
      samples.push(performance.now() - t0)
      await s.stop()
    }
  }
  await firstDetached.stop()
  const dp = summarize(detachedPlain)
  const dn = summarize(detachedNet)
  row('detached, network: false (baseline)', `p50 ${ms(dp.p50)}  p95 ${ms(dp.p95)}`)
  row(
    'detached, network policy',
    `p50 ${ms(dn.p50)}  p95 ${ms(dn.p95)}  (${ratio(dn.p50, dp.p50)}, +${ms(dn.p50 - dp.p50)})`,
  )
  const detachedAdded = median(detachedNet.map((t, i) => t - detachedPlain[i]))
  row('added by a policy, median of the pairs', ms(detachedAdded))
  row('the first detached one with a policy (starts the keeper)', ms(firstMs))
  target('a detached policy adds ≤ 5 ms (median of the pairs, keeper running)', ms(detachedAdded), detachedAdded <= 5)

  heading(`memory per sandbox, ${SANDBOXES} idle sandboxes of each (after one exec each)`)
  const memory = async (network: false | typeof policy) => {
    const rssBefore = process.memoryUsage().rss
    const list: Sandbox[] = []
    for (let i = 0; i < SANDBOXES; i++) list.push(await rt.create({ image: 'base', driver: 'namespace', network }))
    for (const s of list) await s.exec('true')
    await sleep(1000)
    const children = processChildren()
    const pss =
      list.reduce((a, s) => a + treeMemory(runtimeState(rt).read(s.id)!.pid, children).pssBytes, 0) / SANDBOXES
    const hostRss = (process.memoryUsage().rss - rssBefore) / SANDBOXES
    await Promise.all(list.map((s) => s.stop()))
    return { pss, hostRss }
  }
  const memPlain = await memory(false)
  const memNet = await memory(policy)
  row(
    'network: false (baseline): sandbox tree PSS / host RSS growth',
    `${mib(memPlain.pss)} / ${mib(memPlain.hostRss)}`,
  )
  row(
    'network policy: sandbox tree PSS / host RSS growth',
    `${mib(memNet.pss)} / ${mib(memNet.hostRss)}  (PSS +${mib(memNet.pss - memPlain.pss)})`,
  )
  target(
    'a policy adds ≤ 0.5 MiB PSS per sandbox',
    `+${mib(memNet.pss - memPlain.pss)}`,
    memNet.pss - memPlain.pss <= 0.5 * 1024 * 1024,
  )
  note(
    'host RSS growth is noisy (the heap grows in steps); the host side of a policy is two listeners and a few small objects',
  )

  sb = await rt.create({ image: 'base', driver: 'namespace', network: policy })
  // Rounds of a few requests, host then sandbox back to back: the ratio of each pair drifts less
  // with the machine's load (which moves by the second here) than a ratio of whole runs.
  const ROUNDS = 10
  const perRound = Math.max(1, Math.round(REQUESTS / ROUNDS))
  const pairs = async (target = sb!) => {
    const host: number[] = []
    const proxied: number[] = []
    for (let i = 0; i < ROUNDS; i++) {
      host.push((await onHost(loop(`http://127.0.0.1:${port}/`, perRound))) / perRound)
      proxied.push((await inSandbox(target, loop(`http://bench.test:${port}/`, perRound))) / perRound)
    }
    return {
      host: summarize(host).p50,
      proxied: summarize(proxied).p50,
      ratio: median(proxied.map((t, i) => t / host[i])),
    }
  }
  heading(
    `connect latency: ${ROUNDS} rounds of ${perRound} sequential wget requests (a new connection each), host and sandbox back to back`,
  )
  const latency = await pairs()
  // What a request costs in the sandbox without any proxy: wget to a busybox httpd on its own loopback.
  const httpd = sb.start('sh', [
    '-c',
    'mkdir -p /tmp/www && echo ok > /tmp/www/index.html && httpd -f -p 127.0.0.1:8080 -h /tmp/www & until grep -qE ":1F90 0+:0000 0A" /proc/net/tcp; do :; done; echo listening; wait',
  ])
  await new Promise<void>((resolve) => httpd.on('log', (c) => c.data.toString().includes('listening') && resolve()))
  const ownRuns: number[] = []
  const backRuns: number[] = []
  for (let i = 0; i < 3; i++) {
    ownRuns.push(await inSandbox(sb, `export http_proxy=; ${loop('http://127.0.0.1:8080/')}`))
    // busybox wget ignores no_proxy: through the host's proxy, which hands the request back to the sandbox.
    backRuns.push(await inSandbox(sb, loop('http://127.0.0.1:8080/')))
  }
  await httpd.kill('SIGKILL').catch(() => {})
  const ownPer = summarize(ownRuns).p50 / REQUESTS
  const backPer = summarize(backRuns).p50 / REQUESTS
  row('host, busybox wget straight to the server (baseline), median of the rounds', `${ms(latency.host)} per request`)
  row(
    'sandbox, through the host proxy (listener handed over), median of the rounds',
    `${ms(latency.proxied)} per request (+${ms(latency.proxied - latency.host)})`,
  )
  row('sandbox / host, median of the pairs', `${latency.ratio.toFixed(2)}×`)
  row(
    'sandbox, no proxy: to a busybox httpd on its own loopback',
    `${ms(ownPer)} per request (what starting wget in the sandbox costs)`,
  )
  row('sandbox, the same through the proxy (handed back to the sandbox)', `${ms(backPer)} per request`)
  const detached = await rt.create({ image: 'base', driver: 'namespace', network: policy, detached: true })
  try {
    const relayed = await pairs(detached)
    row(
      'detached sandbox, through the keeper’s proxy (listener handed over)',
      `${ms(relayed.proxied)} per request, ${relayed.ratio.toFixed(2)}× the host (${ms(relayed.host)}) in its pairs`,
    )
  } finally {
    await detached.stop()
  }
  note('each request includes starting wget, the same on both sides')

  heading(`the same with ${IDLE_SOCKETS} idle TCP sockets open on the host`)
  const idle = await idleSockets(IDLE_SOCKETS)
  try {
    const busy = await pairs()
    row(`host, straight to the server (baseline), ${idle.count} sockets`, `${ms(busy.host)} per request`)
    row(
      'sandbox, through the host proxy (listener handed over)',
      `${ms(busy.proxied)} per request (+${ms(busy.proxied - busy.host)})`,
    )
    row('sandbox / host, median of the pairs', `${busy.ratio.toFixed(2)}×`)
    target(
      'a proxied request within 1.5× a direct one with the idle sockets open (median of the pairs)',
      `${busy.ratio.toFixed(2)}×`,
      busy.ratio <= 1.5,
    )
  } finally {
    idle.close()
  }

  heading(
    `the host's proxy alone: ${REQUESTS} sequential requests by one client process (a new connection each), median of 3`,
  )
  // The same policy's host side, outside any sandbox, with a unix socket in front of its proxy.
  const aloneDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-bench-proxy-'))
  const alone = await SandboxNetwork.start(parseNetworkOption(policy)!, null, {
    controlDir: aloneDir,
    stagingDir: aloneDir,
  })
  const proxySock = path.join(aloneDir, 'proxy.sock')
  const entry = net.createServer({ allowHalfOpen: true }, (client) => alone.serveProxyConnection(client))
  await new Promise<void>((resolve) => entry.listen(proxySock, resolve))
  const viaSock: number[] = []
  const straight: number[] = []
  try {
    for (let i = 0; i < 3; i++) {
      const r = await clientRequests(proxySock, port, REQUESTS)
      viaSock.push(r.proxied)
      straight.push(r.direct)
    }
  } finally {
    entry.close()
    await alone.close()
    fs.rmSync(aloneDir, { recursive: true, force: true })
  }
  const sockPer = summarize(viaSock).p50
  const straightPer = summarize(straight).p50
  row('straight to the server (baseline)', `${ms(straightPer)} per request`)
  row(
    'to the proxy through a unix socket (absolute-form)',
    `${ms(sockPer)} per request (${ratio(sockPer, straightPer)}, +${ms(sockPer - straightPer)})`,
  )

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
  row(
    'sandbox, through the host proxy (listener handed over)',
    `${sbb.toFixed(0)} MB/s (${((sbb / hb) * 100).toFixed(0)} %)`,
  )
  await sb.stop()
  sb = null
} finally {
  if (sb) await sb.stop().catch(() => {})
  await dispose()
  server.stdin!.end()
}

/**
 * A client process's time per request (ms, each on a new connection, read to its close), through
 * the unix socket `proxySock` in absolute form and straight to the server, interleaved.
 */
async function clientRequests(
  proxySock: string,
  serverPort: number,
  count: number,
): Promise<{ proxied: number; direct: number }> {
  const script = `const net = require('net')
    const one = (connect, req) => new Promise((resolve, reject) => { const s = connect(); s.on('connect', () => s.write(req)); s.on('data', () => {}); s.on('close', resolve); s.on('error', reject) })
    const proxied = ['unix', () => net.connect(${JSON.stringify(proxySock)}), 'GET http://bench.test:${serverPort}/ HTTP/1.1\\r\\nHost: bench.test\\r\\n\\r\\n']
    const direct = ['tcp', () => net.connect(${serverPort}, '127.0.0.1'), 'GET / HTTP/1.1\\r\\nHost: bench.test\\r\\nConnection: close\\r\\n\\r\\n']
    ;(async () => {
      const total = { unix: 0, tcp: 0 }
      for (let i = 0; i < ${count}; i++) for (const [name, connect, req] of [proxied, direct]) { const t0 = performance.now(); await one(connect, req); total[name] += performance.now() - t0 }
      console.log(JSON.stringify({ proxied: total.unix / ${count}, direct: total.tcp / ${count} }))
    })()`
  const { stdout } = await run(process.execPath, ['-e', script], { timeout: 300_000 })
  return JSON.parse(stdout)
}

/**
 * `count` idle TCP sockets on the host's loopback, held by two children (a server that accepts
 * and a client that connects, half each: one process may not hold them all, RLIMIT_NOFILE).
 */
async function idleSockets(count: number): Promise<{ count: number; close(): void }> {
  const half = Math.floor(count / 2)
  const server = spawn(
    process.execPath,
    [
      '-e',
      `const s = require('net').createServer((c) => c.on('error', () => {})); s.maxConnections = ${half}; s.listen(0, '127.0.0.1', () => console.log(s.address().port)); process.stdin.resume(); process.stdin.on('end', () => process.exit(0))`,
    ],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  )
  const serverPort = Number(
    await new Promise<string>((resolve) => server.stdout!.once('data', (d) => resolve(String(d).trim()))),
  )
  const client = spawn(
    process.execPath,
    [
      '-e',
      `const net = require('net'); let open = 0; const next = () => { const c = net.connect(${serverPort}, '127.0.0.1', () => { if (++open === ${half}) console.log(open); else next() }); c.on('error', (e) => { console.log('error ' + e.message); }) }; next(); process.stdin.resume(); process.stdin.on('end', () => process.exit(0))`,
    ],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  )
  const opened = await new Promise<string>((resolve) => client.stdout!.once('data', (d) => resolve(String(d).trim())))
  if (opened.startsWith('error')) note(`idle sockets: ${opened}`)
  const tcp = fs.readFileSync('/proc/net/tcp', 'latin1').split('\n').length - 2
  return {
    count: tcp,
    close() {
      client.stdin!.end()
      server.stdin!.end()
    },
  }
}
