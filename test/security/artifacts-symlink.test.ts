/**
 * artifacts.to is a directory another local user can write to. The sandbox id
 * is in `ps`, so that user (here: a child run as nobody through setpriv) plants symlinks at every
 * name the host could write, pointing at a root-owned file; stop() must never write through them,
 * and the artifacts still arrive. A `to` that is itself a link planted by another user, or that is
 * swapped for one after create, receives nothing.
 * (Issue 28, point 4.)
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import type { Runtime } from '../../lib/runtime.js'
import { testRuntime } from '../helpers/runtime.js'

const NOBODY = 65534
let rt: Runtime
let work: string
let canaryDir: string
let canary: string
const CANARY = 'root-owned, must never change\n'

/** Runs argv as another local user (nobody, no groups). */
function asNobody(argv: string[]): void {
  execFileSync('setpriv', [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', ...argv], { stdio: 'pipe' })
}

beforeAll(() => {
  rt = testRuntime()
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-sec-art-'))
  fs.chmodSync(work, 0o755)
  // The victim: a root-owned file in a directory nobody cannot enter.
  canaryDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-sec-canary-'))
  canary = path.join(canaryDir, 'canary')
  fs.writeFileSync(canary, CANARY, { mode: 0o644 })
})

afterAll(async () => {
  await rt.close()
  fs.rmSync(work, { recursive: true, force: true })
  fs.rmSync(canaryDir, { recursive: true, force: true })
})

/** Every name today's and the reaper's code would write: the destinations and their temporaries, for this pid and its neighbours. */
function predictableNames(id: string): string[] {
  const names = [`${id}.tar`, `${id}.json`]
  for (let pid = process.pid - 2; pid <= process.pid + 2; pid++)
    names.push(`.${id}.tar.${pid}.tmp`, `.${id}.json.${pid}.tmp`)
  return names
}

describe('artifacts: a shared `to`', () => {
  it('artifacts: symlinks planted by another user at every predictable name are refused (never written through)', async () => {
    const to = path.join(work, 'shared')
    fs.mkdirSync(to)
    fs.chmodSync(to, 0o1777) // world-writable and sticky, like /tmp
    const sb = await rt.create({ image: 'base', driver: 'namespace', artifacts: { paths: ['/workspace/out'], to } })
    await sb.exec('sh', ['-c', 'mkdir -p out && echo kept > out/a.txt'])
    for (const name of predictableNames(sb.id)) asNobody(['ln', '-s', canary, path.join(to, name)])
    await sb.stop()
    expect(fs.readFileSync(canary, 'utf8')).toBe(CANARY)
    // The artifacts still arrived, as regular files that replaced the links.
    const tar = path.join(to, `${sb.id}.tar`)
    expect(fs.lstatSync(tar).isFile()).toBe(true)
    expect(execFileSync('tar', ['-xOf', tar, 'workspace/out/a.txt'], { encoding: 'utf8' })).toBe('kept\n')
    expect(fs.lstatSync(path.join(to, `${sb.id}.json`)).isFile()).toBe(true)
    const row = rt.list({ includeHistorical: true }).find((r) => r.id === sb.id)
    expect(row?.artifacts).toMatchObject({ files: ['/workspace/out/a.txt'], error: null })
    // No temporary of ours is left (only the attacker's links at the old names).
    const ours = fs.readdirSync(to).filter((n) => n.startsWith('.') && !fs.lstatSync(path.join(to, n)).isSymbolicLink())
    expect(ours).toEqual([])
  })

  it('artifacts: a `to` that is a symlink planted by another user is refused at create (S001)', async () => {
    const parent = path.join(work, 'parent')
    fs.mkdirSync(parent)
    fs.chmodSync(parent, 0o1777)
    const to = path.join(parent, 'out')
    asNobody(['ln', '-s', canaryDir, to])
    const err = await rt.create({ image: 'base', driver: 'namespace', artifacts: { paths: ['/workspace'], to } }).then(
      async (sb) => {
        await sb.stop()
        return null
      },
      (e: unknown) => e,
    )
    expect(err).toBeInstanceOf(SandboxError)
    expect((err as SandboxError).code).toBe('S001')
    expect((err as SandboxError).message).toContain(to)
    expect(fs.readdirSync(canaryDir)).toEqual(['canary'])
  })

  it('artifacts: a `to` swapped for a symlink by its owner (another user) after create receives nothing', async () => {
    const parent = path.join(work, 'nobodys')
    fs.mkdirSync(parent)
    fs.chownSync(parent, NOBODY, NOBODY)
    const to = path.join(parent, 'out')
    asNobody(['mkdir', to])
    const sb = await rt.create({ image: 'base', driver: 'namespace', artifacts: { paths: ['/workspace'], to } })
    asNobody(['mv', to, path.join(parent, 'moved')])
    asNobody(['ln', '-s', canaryDir, to])
    await sb.stop()
    expect(fs.readdirSync(canaryDir)).toEqual(['canary'])
    expect(fs.readFileSync(canary, 'utf8')).toBe(CANARY)
    expect(fs.readdirSync(path.join(parent, 'moved'))).toEqual([])
  })
})
