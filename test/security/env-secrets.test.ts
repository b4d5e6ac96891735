/**
 * `create({ env })` values are secrets (API keys). Another local user must not find
 * them in any process's command line or environment (bwrap's argv carried the agent's whole
 * configuration), nor in a file of the state directory.
 * (Issue 28.)
 */
import { spawnSync } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { runtimeState, type Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'

const NOBODY = 65534

/**
 * Run as `nobody` (itself aside: the needle is in its argv): every /proc/<pid>/{cmdline,environ} it may read and every file under `dir`
 * it may open, searched for `needle`; prints what it could read and where it found it.
 */
const SCAN = `
const fs = require('node:fs'), path = require('node:path')
const [needle, dir] = process.argv.slice(1)
const found = []; let read = 0
for (const pid of fs.readdirSync('/proc').filter((n) => /^\\d+$/.test(n) && n !== String(process.pid))) {
  for (const f of ['cmdline', 'environ']) {
    try { const t = fs.readFileSync('/proc/' + pid + '/' + f, 'latin1'); read++; if (t.includes(needle)) found.push(pid + '/' + f) } catch {}
  }
}
const walk = (d) => { let es = []; try { es = fs.readdirSync(d, { withFileTypes: true }) } catch { return }
  for (const e of es) { const p = path.join(d, e.name)
    if (e.isDirectory()) walk(p)
    else { try { if (fs.readFileSync(p, 'latin1').includes(needle)) found.push(p) } catch {} } } }
walk(dir)
console.log(JSON.stringify({ read, found }))
`

function scanAsNobody(needle: string, dir: string): { read: number; found: string[] } {
  const r = spawnSync(process.execPath, ['-e', SCAN, needle, dir], { uid: NOBODY, gid: NOBODY, encoding: 'utf8' })
  expect(r.status, r.stderr).toBe(0)
  return JSON.parse(r.stdout)
}

/** Every file under dir, read as root, that contains needle. */
function filesContaining(dir: string, needle: string): string[] {
  const out: string[] = []
  for (const entry of fs.readdirSync(dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue
    const file = `${entry.parentPath}/${entry.name}`
    try {
      if (fs.readFileSync(file, 'latin1').includes(needle)) out.push(file)
    } catch {}
  }
  return out
}

const secret = `kb-secret-${crypto.randomBytes(16).toString('hex')}`
let rt: Runtime
let stateDir: string
let sbs: Sandbox[]

beforeAll(async () => {
  rt = testRuntime()
  sbs = await Promise.all([
    rt.create({ image: 'base', driver: 'namespace', env: { SECRET: secret } }),
    rt.create({ image: 'base', driver: 'namespace', env: { SECRET: secret }, detached: true }),
  ])
})

afterAll(async () => {
  await Promise.all(sbs.map((sb) => sb.stop()))
  await rt.close()
})

describe.skipIf(process.getuid?.() !== 0)('env: another local user hunting create({ env }) values', () => {
  it('env: reading every process command line and environment, and every state file, as nobody is refused/held', async () => {
    stateDir = runtimeState(rt).root
    // The state directory made traversable: what protects the secret must be the sandbox's own files.
    fs.chmodSync(stateDir, 0o755)
    for (const sb of sbs) {
      // The commands still get it, and run while the scan looks.
      expect((await sb.exec('sh', ['-c', 'echo "$SECRET"'])).stdout).toBe(`${secret}\n`)
      sb.start('sleep', ['30'])
    }
    const scan = scanAsNobody(secret, stateDir)
    expect(scan.read).toBeGreaterThan(10) // it did read the process table
    expect(scan.found).toEqual([])
    // At rest only the sandbox's record keeps it (0600 in the sandbox's 0700 directory, as the
    // scan shows): the agent's configuration file lives only while bwrap starts.
    expect(filesContaining(stateDir, secret).filter((f) => !f.endsWith('/state.json'))).toEqual([])
  })
})
