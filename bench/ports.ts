/**
 * Benchmark (issue 15, ports): throughput and connect latency of sb.connect() and
 * sb.forward(), beside a direct loopback connection on the host in the same run. The same
 * python server program runs on the host's 127.0.0.1 (the baseline) and inside a sandbox
 * without network (reached through the agent connection), so the only difference is the path.
 *
 * - download: the server sends N MiB and closes; the host counts them.
 * - upload: the host sends N MiB and ends; the server answers with the count and closes.
 * - connect: open a connection, one byte there and back, close (p50/p99 over many rounds).
 *
 * Usage: node --import tsx bench/ports.ts [--mib 256] [--rounds 200]
 */
import { spawn } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import net from 'node:net'
import type { Duplex } from 'node:stream'
import { parseArgs } from 'node:util'
import type { Sandbox } from '../lib/sandbox.js'
import { benchRuntime } from './support/host.js'
import { heading, note, row } from './support/report.js'
import { mbps, median, ms, percentile, ratio } from './support/stats.js'

const { values } = parseArgs({
  options: { mib: { type: 'string', default: '256' }, rounds: { type: 'string', default: '200' } },
})
const MIB = Number(values.mib)
const ROUNDS = Number(values.rounds)
const REPEATS = 3
const BLOCK = crypto.randomBytes(1024 * 1024)

/** Three servers from one base port: +0 source (8-byte size in, that many bytes out), +1 sink, +2 echo. */
const SERVER = `
import socket, struct, sys, threading
base = int(sys.argv[1])
chunk = b'x' * (1 << 20)
def serve(port, handler):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('127.0.0.1', port))
    s.listen(256)
    def loop():
        while True:
            c, _ = s.accept()
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=handler, args=(c,), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()
def source(c):
    want = struct.unpack('>Q', c.recv(8))[0]
    view = memoryview(chunk)
    while want > 0:
        n = min(want, len(chunk))
        c.sendall(view[:n])
        want -= n
    c.close()
def sink(c):
    total = 0
    buf = bytearray(1 << 20)
    while True:
        n = c.recv_into(buf)
        if n == 0:
            break
        total += n
    c.sendall(str(total).encode())
    c.close()
def echo(c):
    while True:
        b = c.recv(65536)
        if not b:
            break
        c.sendall(b)
    c.close()
serve(base, source)
serve(base + 1, sink)
serve(base + 2, echo)
print('ready', flush=True)
threading.Event().wait()
`

type Opener = (port: number) => Promise<Duplex>

function closed(socket: Duplex): Promise<void> {
  return new Promise((resolve, reject) =>
    socket.once('close', () => (socket.errored ? reject(socket.errored) : resolve())),
  )
}

async function download(open: Opener, base: number, bytes: number): Promise<number> {
  const t0 = performance.now()
  const socket = await open(base)
  let got = 0
  socket.on('data', (d: Buffer) => (got += d.length))
  const size = Buffer.alloc(8)
  size.writeBigUInt64BE(BigInt(bytes))
  socket.end(size)
  await closed(socket)
  if (got !== bytes) throw new Error(`download got ${got} of ${bytes} bytes`)
  return performance.now() - t0
}

async function upload(open: Opener, base: number, bytes: number): Promise<number> {
  const t0 = performance.now()
  const socket = await open(base + 1)
  let answer = ''
  socket.on('data', (d: Buffer) => (answer += d.toString()))
  for (let left = bytes; left > 0; left -= BLOCK.length) {
    if (!socket.write(left >= BLOCK.length ? BLOCK : BLOCK.subarray(0, left)))
      await new Promise((r) => socket.once('drain', r))
  }
  socket.end()
  await closed(socket)
  if (Number(answer) !== bytes) throw new Error(`upload: the server counted ${answer} of ${bytes} bytes`)
  return performance.now() - t0
}

async function roundTrip(open: Opener, base: number): Promise<number> {
  const t0 = performance.now()
  const socket = await open(base + 2)
  const back = new Promise((r) => socket.once('data', r))
  socket.write('x')
  await back
  const t1 = performance.now()
  socket.end()
  await closed(socket)
  return t1 - t0
}

function direct(port: number): Promise<Duplex> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: '127.0.0.1', port, noDelay: true }, () => resolve(s))
    s.once('error', reject)
  })
}

async function main(): Promise<void> {
  const { rt, dispose } = benchRuntime()
  const hostBase = 20000 + Math.floor(Math.random() * 20000)
  const script = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-bench-ports-')), 'server.py')
  fs.writeFileSync(script, SERVER)
  const hostServer = spawn('python3', ['-u', script, String(hostBase)], { stdio: ['ignore', 'pipe', 'inherit'] })
  let sb: Sandbox | undefined
  try {
    await new Promise<void>((resolve) =>
      hostServer.stdout!.on('data', (d: Buffer) => d.toString().includes('ready') && resolve()),
    )
    sb = await rt.create({ image: 'python' })
    await sb.fs.writeFile('/srv/server.py', SERVER, { parents: true })
    const inside = sb.start('python3', ['-u', '/srv/server.py', '7000'], { timeoutMs: 600_000 })
    await new Promise<void>((resolve) =>
      inside.on('stdout', (d: Buffer) => d.toString().includes('ready') && resolve()),
    )
    const fw = await sb.forward(7000)
    const fw1 = await sb.forward(7001)
    const fw2 = await sb.forward(7002)
    const forwarded: Record<number, number> = { 7000: fw.port, 7001: fw1.port, 7002: fw2.port }
    const paths: Array<[string, Opener, number]> = [
      ['direct host loopback (baseline)', direct, hostBase],
      ['sb.connect()', (port) => sb!.connect(port), 7000],
      ['sb.forward() + host loopback', (port) => direct(forwarded[port]), 7000],
    ]
    const bytes = MIB * 1024 * 1024
    heading(
      `ports: throughput, ${MIB} MiB per transfer, median of ${REPEATS} (${sb.driver} driver, python servers on both sides)`,
    )
    const results: Record<string, { down: number; up: number }> = {}
    for (const [label, open, base] of paths) {
      await download(open, base, 16 << 20) // warm-up
      await upload(open, base, 16 << 20)
      const down: number[] = []
      const up: number[] = []
      for (let i = 0; i < REPEATS; i++) down.push(mbps(bytes, await download(open, base, bytes)))
      for (let i = 0; i < REPEATS; i++) up.push(mbps(bytes, await upload(open, base, bytes)))
      results[label] = { down: median(down), up: median(up) }
    }
    const baseline = results[paths[0][0]]
    for (const [label] of paths) {
      const r = results[label]
      row(
        `${label}: download (sandbox → host)`,
        `${r.down.toFixed(0)} MB/s  ${ratio(r.down, baseline.down)} of baseline`,
      )
      row(`${label}: upload (host → sandbox)`, `${r.up.toFixed(0)} MB/s  ${ratio(r.up, baseline.up)} of baseline`)
    }
    heading(`ports: connect + 1-byte round trip + close, ${ROUNDS} rounds`)
    const latencies: Record<string, number[]> = {}
    for (const [label, open, base] of paths) {
      for (let i = 0; i < 20; i++) await roundTrip(open, base)
      const samples: number[] = []
      for (let i = 0; i < ROUNDS; i++) samples.push(await roundTrip(open, base))
      latencies[label] = samples
    }
    const baseP50 = percentile(latencies[paths[0][0]], 50)
    for (const [label] of paths) {
      const s = latencies[label]
      row(
        label,
        `p50 ${ms(percentile(s, 50))}  p99 ${ms(percentile(s, 99))}  (${ratio(percentile(s, 50), baseP50)} of baseline p50)`,
      )
    }
    note('the baseline server is the same python program on the host; both sides share the 2 cores of this machine')
  } finally {
    hostServer.kill()
    fs.rmSync(path.dirname(script), { recursive: true, force: true })
    if (sb && sb.status !== 'destroyed') await sb.stop()
    await dispose()
  }
}

await main()
