/**
 * Benchmark (issue 15): a server started with start() keeps answering through sb.forward() and
 * through `krunbox port-forward` long after it started. A python http.server runs in a python
 * sandbox with the default idle timeout (5 min) and no deadline; every `--every` minutes the host
 * fetches a page through the forward, and at the end also through the CLI's port-forward. The
 * baseline in the same run is the first fetch.
 *
 * Usage: node --import tsx bench/long-server.ts [--minutes 15] [--every 5]
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import readline from 'node:readline'
import { parseArgs } from 'node:util'
import { Runtime } from '../lib/runtime.js'
import { heading, row, target } from './support/report.js'
import { ms } from './support/stats.js'

const { values } = parseArgs({
  options: { minutes: { type: 'string', default: '15' }, every: { type: 'string', default: '5' } },
})
const MINUTES = Number(values.minutes)
const EVERY = Number(values.every)

const home = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-long-server-'))
const rt = new Runtime({ stateDir: path.join(home, 'state', 'krunbox', 'sandboxes') })

/** GET / through host port `port`: status and time taken. */
function fetchPage(port: number): Promise<{ status: number; ms: number }> {
  const t0 = performance.now()
  return new Promise((resolve, reject) => {
    http
      .get({ host: '127.0.0.1', port, path: '/', agent: false }, (res) => {
        res.resume()
        res.on('end', () => resolve({ status: res.statusCode ?? 0, ms: performance.now() - t0 }))
      })
      .on('error', reject)
  })
}

/** `krunbox port-forward <id> 8000:<hostPort>` as a user would run it; resolves once it listens. */
async function cliForward(id: string, token: string, hostPort: number): Promise<() => void> {
  const cli = path.resolve('dist/cli.js')
  const child = spawn(process.execPath, [cli, 'port-forward', id, `8000:${hostPort}`], {
    env: {
      ...process.env,
      XDG_STATE_HOME: path.join(home, 'state'),
      XDG_CONFIG_HOME: path.join(home, 'config'),
      KRUNBOX_TOKEN: token,
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  })
  for await (const line of readline.createInterface({ input: child.stdout! })) {
    if (line.includes(String(hostPort))) break
  }
  return () => child.kill('SIGINT')
}

heading(`a python http.server started with start(), reached through forward() for ${MINUTES} min`)
const sb = await rt.create({ image: 'python', driver: 'namespace', detached: true, ttlMs: (MINUTES + 10) * 60_000 })
const server = sb.start('python3', ['-u', '-m', 'http.server', '8000', '--bind', '127.0.0.1'], { cwd: '/workspace' })
await new Promise<void>((resolve) => server.on('stdout', (d) => String(d).includes('Serving HTTP') && resolve()))
const forward = await sb.forward(8000)
const started = performance.now()
const fetches: { minute: number; status: number; ms: number }[] = []
for (let minute = 0; ; minute += EVERY) {
  const r = await fetchPage(forward.port)
  fetches.push({ minute, ...r })
  row(`forward(): GET / at ${minute} min`, `${r.status} in ${ms(r.ms)} (command ${server.status})`)
  if (minute >= MINUTES) break
  // The workload is what is measured here: nothing but the server runs in between.
  await new Promise((r) => setTimeout(r, EVERY * 60_000 - ((performance.now() - started) % (EVERY * 60_000))))
}
const cliPort = forward.port + 1
const stopCli = await cliForward(sb.id, sb.accessToken!, cliPort)
const viaCli = await fetchPage(cliPort)
stopCli()
row(`krunbox port-forward: GET / at ${MINUTES} min`, `${viaCli.status} in ${ms(viaCli.ms)}`)
target(
  `the server answers after ${MINUTES} min, both ways`,
  `${fetches.at(-1)!.status} / ${viaCli.status}`,
  fetches.at(-1)!.status === 200 && viaCli.status === 200,
)
await forward.close()
await sb.stop()
await rt.close()
fs.rmSync(home, { recursive: true, force: true })
