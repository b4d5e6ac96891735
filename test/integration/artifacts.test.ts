/**
 * Artifacts survive the sandbox, however it ends. The agent archives the
 * configured globs at shutdown; the host (or the reaper, when no krunbox process is left)
 * copies the archive to `<to>/<id>.tar` and the manifest to `<to>/<id>.json`, and the
 * sandbox's record names what was kept.
 * (Issue 15, point 6.)
 */
import { execFileSync, spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { collectArtifacts } from '../../lib/artifacts.js'
import { processesLeft, testRuntime } from '../helpers/runtime.js'

let rt: Runtime
let to: string
beforeAll(() => {
  rt = testRuntime()
  to = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-artifacts-'))
})
afterAll(async () => {
  await rt.close()
  fs.rmSync(to, { recursive: true, force: true })
})

const tarList = (file: string) => execFileSync('tar', ['-tf', file], { encoding: 'utf8' }).trim().split('\n').sort()
const record = (id: string) => rt.list({ includeHistorical: true }).find((r) => r.id === id)

async function withOutputs(options: Record<string, unknown> = {}): Promise<Sandbox> {
  const sb = await rt.create({
    image: 'base',
    driver: 'namespace',
    artifacts: { paths: ['/workspace/out/*.txt', '/workspace/report'], to },
    ...options,
  })
  await sb.exec('sh', [
    '-c',
    'mkdir -p out report && echo a > out/a.txt && echo b > out/b.txt && echo skip > out/c.log && echo r > report/r.xml',
  ])
  return sb
}

describe('artifacts', () => {
  it('stop keeps the listed globs (a directory whole) and the record names them', async () => {
    const sb = await withOutputs()
    await sb.stop()
    expect(tarList(path.join(to, `${sb.id}.tar`))).toEqual([
      'workspace/out/a.txt',
      'workspace/out/b.txt',
      'workspace/report/',
      'workspace/report/r.xml',
    ])
    const out = execFileSync('tar', ['-xOf', path.join(to, `${sb.id}.tar`), 'workspace/out/a.txt'], {
      encoding: 'utf8',
    })
    expect(out).toBe('a\n')
    expect(record(sb.id)?.artifacts).toMatchObject({
      tar: path.join(to, `${sb.id}.tar`),
      files: ['/workspace/out/a.txt', '/workspace/out/b.txt', '/workspace/report/r.xml'],
      truncated: false,
      error: null,
    })
    expect(fs.readdirSync(to).filter((n) => n.startsWith('.'))).toEqual([]) // no temporary left
  })

  it("a user's private report (0600 of uid 1000 in a 0700 directory) is kept whole", async () => {
    const sb = await rt.create({ image: 'base', driver: 'namespace', artifacts: { paths: ['/workspace/report'], to } })
    await sb.exec('sh', ['-c', 'mkdir -m 700 report && echo private > report/r.xml && chmod 600 report/r.xml'], {
      user: 'sandbox',
    })
    await sb.stop()
    expect(tarList(path.join(to, `${sb.id}.tar`))).toEqual(['workspace/report/', 'workspace/report/r.xml'])
    expect(
      execFileSync('tar', ['-xOf', path.join(to, `${sb.id}.tar`), 'workspace/report/r.xml'], { encoding: 'utf8' }),
    ).toBe('private\n')
    expect(record(sb.id)?.artifacts).toMatchObject({ files: ['/workspace/report/r.xml'], error: null })
  })

  it('an idle reap and a TTL keep them too', async () => {
    const idle = await withOutputs({ idleTimeoutMs: 500 })
    const ttl = await withOutputs({ ttlMs: 1500, idleTimeoutMs: 0 })
    await idle.waitFor('destroyed', { timeoutMs: 30_000 })
    await ttl.waitFor('destroyed', { timeoutMs: 30_000 })
    expect([idle.destroyedReason, ttl.destroyedReason]).toEqual(['idle_expired', 'ttl_expired'])
    for (const sb of [idle, ttl]) expect(record(sb.id)?.artifacts?.files).toHaveLength(3)
  })

  it('over maxBytes, what fit is kept and the record says S403', async () => {
    const sb = await rt.create({
      image: 'base',
      driver: 'namespace',
      artifacts: { paths: ['/workspace/*.bin'], to, maxBytes: 150_000 },
    })
    await sb.exec('sh', ['-c', 'head -c 100000 /dev/zero > 1.bin; head -c 100000 /dev/zero > 2.bin'])
    await sb.stop()
    expect(record(sb.id)?.artifacts).toMatchObject({
      files: ['/workspace/1.bin'],
      bytes: 100_000,
      truncated: true,
      error: 'S403',
    })
  })

  it("when: 'on_failure' keeps nothing after a clean run, and keeps them after a failed command", async () => {
    const clean = await withOutputs({ artifacts: { paths: ['/workspace/out'], to, when: 'on_failure' } })
    await clean.stop()
    expect(fs.existsSync(path.join(to, `${clean.id}.tar`))).toBe(false)
    expect(record(clean.id)?.artifacts).toBeNull()
    const failed = await withOutputs({ artifacts: { paths: ['/workspace/out'], to, when: 'on_failure' } })
    expect((await failed.exec('false')).exitCode).toBe(1)
    await failed.stop()
    expect(record(failed.id)?.artifacts?.files).toHaveLength(3)
  })

  it('S205 is written only where no manifest is yet: the host and the reaper may both collect, the first copy stays', () => {
    const id = '00000000-0000-4000-8000-00000000a205'
    const emptyControlDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-ctl-'))
    const config = { paths: ['/workspace'], to, when: 'always' as const, maxBytes: 1024 }
    const manifest = path.join(to, `${id}.json`)
    try {
      fs.writeFileSync(manifest, '{"files":["/workspace/x"],"bytes":1,"truncated":false,"error":null}')
      collectArtifacts(emptyControlDir, id, config)
      expect(JSON.parse(fs.readFileSync(manifest, 'utf8')).files).toEqual(['/workspace/x'])
      fs.rmSync(manifest)
      collectArtifacts(emptyControlDir, id, config)
      expect(JSON.parse(fs.readFileSync(manifest, 'utf8')).error).toBe('S205')
      expect(fs.readdirSync(to).filter((n) => n.startsWith(`.${id}`))).toEqual([])
    } finally {
      fs.rmSync(emptyControlDir, { recursive: true, force: true })
      fs.rmSync(manifest, { force: true })
    }
  })

  it('bad options name the bad value', async () => {
    await expect(rt.create({ image: 'base', artifacts: { paths: ['relative/x'], to } })).rejects.toMatchObject({
      code: 'S001',
      message: expect.stringContaining('relative/x'),
    })
    await expect(
      rt.create({ image: 'base', artifacts: { paths: ['/x'], to, when: 'sometimes' as never } }),
    ).rejects.toMatchObject({ code: 'S001', message: expect.stringContaining('sometimes') })
    await expect(rt.create({ image: 'base', artifacts: { paths: [], to } })).rejects.toMatchObject({ code: 'S001' })
  })
})

describe('artifacts with no krunbox process left', () => {
  it('the reaper keeps them after a detached TTL, and after the owning host was SIGKILLed', async () => {
    const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-state-'))
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', path.resolve('test/fixtures/artifacts-host-child.ts'), stateDir, to],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    )
    try {
      const line = await new Promise<string>((resolve, reject) => {
        let out = ''
        child.stdout!.on('data', (d: Buffer) => {
          out += d.toString()
          if (out.includes('\n')) resolve(out.split('\n')[0])
        })
        child.once('exit', (code) => reject(new Error(`fixture exited with ${code}`)))
      })
      const ids = JSON.parse(line) as { owned: string; detached: string }
      const exited = new Promise((resolve) => child.once('exit', resolve))
      child.kill('SIGKILL')
      await exited
      const history = (id: string) => path.join(stateDir, '.history', `${id}.json`)
      for (const id of [ids.owned, ids.detached]) {
        await expect.poll(() => fs.existsSync(history(id)), { timeout: 30_000, interval: 100 }).toBe(true)
        expect(tarList(path.join(to, `${id}.tar`))).toEqual(['workspace/out/', 'workspace/out/result.txt'])
      }
      expect(JSON.parse(fs.readFileSync(history(ids.owned), 'utf8')).reason).toBe('host_exit')
      expect(JSON.parse(fs.readFileSync(history(ids.detached), 'utf8')).reason).toBe('ttl_expired')
      // The reaper writes the history line, then removes the entry.
      await expect
        .poll(() => fs.readdirSync(stateDir).filter((n) => !n.startsWith('.')), { timeout: 10_000, interval: 50 })
        .toEqual([])
      for (const id of [ids.owned, ids.detached]) expect(await processesLeft(id)).toEqual([])
    } finally {
      child.kill('SIGKILL')
      fs.rmSync(stateDir, { recursive: true, force: true })
    }
  }, 90_000)
})
