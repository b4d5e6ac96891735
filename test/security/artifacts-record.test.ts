/**
 * list({ includeHistorical }) reads each ended sandbox's artifacts record back from `<to>/<id>.json`,
 * and `to` may be shared with other local users. One of them (here: nobody, through setpriv) puts a
 * link to a root-only file in place of the manifest after stop, or swaps a parent of `to` it owns
 * for a link to a root-only directory holding a manifest of its choosing: the host (root) must read
 * neither, and the record says S216 instead of saying nothing.
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runtime } from '../../lib/runtime.js'
import { testRuntime } from '../helpers/runtime.js'

const NOBODY = 65534
const SECRET = 'ROOT-ONLY-SECRET'
let rt: Runtime
let work: string
let secretDir: string

function asNobody(argv: string[]): void {
  execFileSync('setpriv', [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', ...argv], { stdio: 'pipe' })
}

/** A root-only manifest-shaped file: what the attacker wants the host to read out for it. */
function secretManifest(file: string): void {
  fs.writeFileSync(
    file,
    JSON.stringify({ files: [SECRET], bytes: 1, truncated: false, error: null, message: SECRET }),
    { mode: 0o600 },
  )
}

beforeAll(() => {
  rt = testRuntime()
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-sec-record-'))
  fs.chmodSync(work, 0o755)
  secretDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-sec-secret-'))
  fs.chmodSync(secretDir, 0o700)
})

afterAll(async () => {
  await rt.close()
  fs.rmSync(work, { recursive: true, force: true })
  fs.rmSync(secretDir, { recursive: true, force: true })
})

describe('artifacts record: read back from a shared `to`', () => {
  it('artifacts record: a manifest replaced by another user with a link to a root-only file is refused (S216, never read)', async () => {
    const to = path.join(work, 'shared')
    fs.mkdirSync(to)
    fs.chmodSync(to, 0o777) // writable by everyone, not sticky: others may replace our files
    const secret = path.join(secretDir, 'secret.json')
    secretManifest(secret)
    const sb = await rt.create({ image: 'base', driver: 'namespace', artifacts: { paths: ['/workspace'], to } })
    await sb.stop()
    const manifest = path.join(to, `${sb.id}.json`)
    asNobody(['rm', '-f', manifest])
    asNobody(['ln', '-s', secret, manifest])
    const row = rt.list({ includeHistorical: true }).find((r) => r.id === sb.id)
    expect(JSON.stringify(row)).not.toContain(SECRET)
    expect(row?.artifacts).toMatchObject({ error: 'S216', files: [] })
    expect(row?.artifacts?.message).toContain(manifest)
  })

  it('artifacts record: a parent of `to` swapped by its owner (another user) for a link to a root-only directory is refused (S216, never read)', async () => {
    const shared = path.join(work, 'sticky')
    fs.mkdirSync(shared)
    fs.chmodSync(shared, 0o1777)
    const mine = path.join(shared, 'nobodys')
    asNobody(['mkdir', '-p', path.join(mine, 'out')])
    const to = path.join(mine, 'out')
    const sb = await rt.create({ image: 'base', driver: 'namespace', artifacts: { paths: ['/workspace'], to } })
    await sb.stop()
    // The root-only directory holds a manifest of the attacker's choosing at the same relative name.
    fs.mkdirSync(path.join(secretDir, 'out'), { recursive: true })
    secretManifest(path.join(secretDir, 'out', `${sb.id}.json`))
    asNobody(['mv', mine, path.join(shared, 'moved')])
    asNobody(['ln', '-s', secretDir, mine])
    const row = rt.list({ includeHistorical: true }).find((r) => r.id === sb.id)
    expect(JSON.stringify(row)).not.toContain(SECRET)
    expect(row?.artifacts).toMatchObject({ error: 'S216', files: [] })
    expect(row?.artifacts?.message).toContain(to)
  })
})
