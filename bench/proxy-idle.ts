/**
 * A sandbox proxy under a flood of idle connections (issue 28): the host's RSS and its event
 * loop's delay while a child process holds N connections open to the proxy without sending a
 * request (a sandbox can do this on its proxy port). The proxy serves each connection of a unix
 * socket as it serves one on a sandbox's handed-over listener (before issue 34, it listened on
 * 127.0.0.1 with a peer check per connection read from /proc/net/tcp: see docs/network.md for
 * those figures).
 *
 *   node --import tsx bench/proxy-idle.ts [--connections 4000] [--max-connections N] [--headers-timeout-ms MS]
 *
 * --max-connections overrides the proxy's cap (the default's refusals otherwise hide what the
 * rest costs). Prints one JSON line.
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { parseArgs } from 'node:util'

const { values } = parseArgs({
  options: {
    connections: { type: 'string', default: '4000' },
    'max-connections': { type: 'string' },
    'headers-timeout-ms': { type: 'string' },
  },
})
const connections = Number(values.connections)
const { startProxy } = await import('../lib/network/proxy.js')
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-proxy-idle-'))
const socketPath = path.join(dir, 'proxy.sock')

const limits = {
  ...(values['max-connections'] && { maxConnections: Number(values['max-connections']) }),
  ...(values['headers-timeout-ms'] && { headersTimeoutMs: Number(values['headers-timeout-ms']) }),
}
const proxy = startProxy(
  {
    route: async () => ({ refused: 'bench' }),
    denied: () => {},
    allowed: () => {},
  },
  limits,
)
// Each connection served as one on a sandbox's handed-over listener is.
const entry = net.createServer({ allowHalfOpen: true }, (client) => proxy.serve(client))
await new Promise<void>((resolve) => entry.listen(socketPath, resolve))

const baselineRss = process.memoryUsage().rss
let peakRss = baselineRss
const sampler = setInterval(() => (peakRss = Math.max(peakRss, process.memoryUsage().rss)), 20)
const delay = monitorEventLoopDelay({ resolution: 10 })
delay.enable()
const started = Date.now()

// The flood: a child that opens every connection and holds it, sending nothing.
const script = `
  const net = require('net'); let open = 0, closed = 0
  // In batches, so that the listen backlog (511) does not leave connections half-accepted.
  const one = () => new Promise((resolve) => {
    const s = net.connect(${JSON.stringify(socketPath)})
    s.on('connect', () => { open++; resolve() })
    s.on('error', resolve)
    s.on('close', () => closed++)
    s.resume()
  })
  ;(async () => {
    for (let i = 0; i < ${connections}; i += 250) await Promise.all(Array.from({ length: Math.min(250, ${connections} - i) }, one))
    console.log('connected')
  })()
  process.stdin.on('end', () => { console.log(JSON.stringify({ open, closed })); process.exit(0) })
  process.stdin.resume()
`
const child = spawn(process.execPath, ['-e', script], { stdio: ['pipe', 'pipe', 'inherit'] })
let out = ''
await new Promise<void>((resolve) =>
  child.stdout.on('data', (d) => ((out += d), out.includes('connected') && resolve())),
)
const connectedMs = Date.now() - started
const ending = new Promise<string>((resolve) =>
  child.stdout.on('data', (d) => ((out += d), out.trim().split('\n').length >= 2 && resolve(out))),
)
child.stdin.end()
const childSaw = JSON.parse((await ending).trim().split('\n').pop()!)
clearInterval(sampler)
delay.disable()
entry.close()
await proxy.close()
fs.rmSync(dir, { recursive: true, force: true })

const mib = (b: number) => Math.round((b / 1024 / 1024) * 10) / 10
process.stdout.write(
  JSON.stringify({
    connections,
    limits,
    clientConnected: childSaw.open,
    clientOpenAtEnd: childSaw.open - childSaw.closed,
    connectedMs,
    rssBaselineMiB: mib(baselineRss),
    rssPeakMiB: mib(peakRss),
    eventLoopDelayMaxMs: Math.round(delay.max / 1e6),
    eventLoopDelayP99Ms: Math.round(delay.percentile(99) / 1e6),
  }) + '\n',
)
process.exit(0)
