/**
 * The last behaviours of the reference APIs (the seed documents), each tested here
 * under a name that quotes the rule it follows. The deliberate differences are in docs/api.md,
 * "Differences from the reference APIs", and are not tested as if they were the rule.
 * (Issue 33.)
 */
import { execFileSync } from 'node:child_process'
import { once } from 'node:events'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'

let rt: Runtime
let sb: Sandbox

beforeAll(async () => {
  rt = testRuntime({
    customImages: { broken: '/nonexistent-krunbox-image-dir' },
    imageAllowlist: ['base', 'python', 'broken'],
  })
  sb = await rt.create({ image: 'base', driver: 'namespace' })
})
afterAll(async () => {
  await rt.close()
})

async function errorOf(p: Promise<unknown>): Promise<SandboxError> {
  const err = await p.then(
    () => null,
    (e: unknown) => e,
  )
  expect(err).toBeInstanceOf(SandboxError)
  return err as SandboxError
}

describe('001 "Timeout Handling"', () => {
  it('"The status will show exit_code: null and an error message": a timed-out command has a failReason', async () => {
    const r = await sb.exec('sleep', ['30'], { timeoutMs: 300, killGraceMs: 0 })
    expect(r).toMatchObject({ status: 'timed_out', timedOut: true, exitCode: null })
    expect(r.failReason).toMatch(/timed out after 300 ms/)
  })

  it('"For foreground commands, you\'ll receive an error event in the stream": S200 before exit; none heard, none thrown', async () => {
    const heard = sb.start('sleep', ['30'], { timeoutMs: 300, killGraceMs: 0 })
    const order: string[] = []
    const errored = new Promise<SandboxError>((resolve) => heard.on('error', (e) => (order.push('error'), resolve(e))))
    heard.on('exit', () => order.push('exit'))
    const err = await errored
    expect(err).toBeInstanceOf(SandboxError)
    expect(err.code).toBe('S200')
    expect(err.message).toContain('timed out after 300 ms')
    expect(err.message).toContain((await heard.wait()).failReason)
    expect(order).toEqual(['error', 'exit'])
    // Nobody listens for 'error' here: the timeout must not become an uncaught exception of the host
    // (vitest fails the run on one).
    const unheard = sb.start('sleep', ['30'], { timeoutMs: 300, killGraceMs: 0 })
    expect((await unheard.wait()).status).toBe('timed_out')
  })
})

describe('000 "Live SSE stream": "Event types are log, heartbeat, terminal, and error"', () => {
  it('a silent followed command gets a heartbeat every heartbeatMs, each confirmed by its agent', async () => {
    const cmd = sb.start('sh', ['-c', 'echo one; exec sleep 30'], { heartbeatMs: 200 })
    const beats: Array<{ status: string; lastSeq: number; timestamp: number }> = []
    const twoBeats = new Promise<void>((resolve) =>
      cmd.on('heartbeat', (beat) => {
        beats.push(beat)
        if (beats.length === 2) resolve()
      }),
    )
    await twoBeats
    expect(beats.map((b) => b.status)).toEqual(['running', 'running'])
    expect(beats[1].lastSeq).toBe(cmd.lastSeq)
    expect(beats[1].timestamp).toBeGreaterThanOrEqual(beats[0].timestamp + 200)
    await cmd.cancel({ mode: 'force' })
    expect((await cmd.wait()).status).toBe('canceled')
  })

  it('heartbeatMs is checked: 0 turns heartbeats off, 50 is out of range (S003), a string is S001', async () => {
    expect((await errorOf(Promise.resolve().then(() => sb.start('true', [], { heartbeatMs: 50 })))).code).toBe('S003')
    expect(
      (await errorOf(Promise.resolve().then(() => sb.start('true', [], { heartbeatMs: '1' as never })))).code,
    ).toBe('S001')
    const off = sb.start('true', [], { heartbeatMs: 0 })
    expect((await off.wait()).exitCode).toBe(0)
  })
})

describe('003 "expiring: Cleanup has begun; new operations are rejected"', () => {
  it('fs operations, like exec, are refused with S004 while the sandbox is expiring', async () => {
    // The TTL leaves room for a slow boot on a loaded machine: expiring must come after create resolved.
    const short = await rt.create({ image: 'base', driver: 'namespace', ttlMs: 4000 })
    const refused = await new Promise<Promise<SandboxError[]>>((resolve, reject) =>
      short.on('status', (status) => {
        if (status === 'destroyed')
          reject(new Error(`destroyed (${short.destroyedReason}) without passing through expiring`))
        if (status !== 'expiring') return
        // Called in the very turn the status changes: nothing here waits for a moment to pass.
        resolve(
          Promise.all([
            errorOf(short.fs.readFile('/etc/hostname')),
            errorOf(short.fs.ls('/')),
            errorOf(short.exec('true')),
            errorOf(short.info()),
          ]),
        )
      }),
    )
    for (const err of await refused) {
      expect(err.code).toBe('S004')
      expect(err.message).toContain('expiring')
    }
    await short.waitFor('destroyed')
    expect(short.destroyedReason).toBe('ttl_expired')
  })
})

describe('003 "Pass include=historical to also get destroyed and failed records"', () => {
  it('a sandbox that failed on its image, before it had a state entry, is listed with status failed and its error', async () => {
    const doomed = await rt.create({
      image: 'broken',
      driver: 'namespace',
      wait: false,
      metadata: { seed: 'image-error' },
    })
    const err = await errorOf(doomed.ready())
    expect(err.code).toBe('S104')
    expect(rt.list().map((r) => r.id)).not.toContain(doomed.id)
    const row = rt.list({ includeHistorical: true }).find((r) => r.id === doomed.id)
    expect(row).toMatchObject({
      status: 'failed',
      image: 'broken',
      metadata: { seed: 'image-error' },
      error: { code: 'S104' },
    })
    expect(row?.error?.message).toBe(err.message)
    expect(row?.destroyedReason).toBeUndefined()
  })
})

describe('002 "States": "ready … service_urls populated"', () => {
  it('sb.url(port) gives a URL that reaches the service; the handle and info() list it while the sandbox lives', async () => {
    const web = await rt.create({ image: 'python', driver: 'namespace' })
    try {
      expect(web.services).toEqual([])
      const server = web.start(
        'python3',
        [
          '-u',
          '-c',
          "import http.server as h; s = h.HTTPServer(('127.0.0.1', 8000), h.SimpleHTTPRequestHandler); print('ready', flush=True); s.serve_forever()",
        ],
        { cwd: '/etc' },
      )
      await new Promise<void>((resolve) => server.on('stdout', (d) => d.toString().includes('ready') && resolve()))
      const [url, again] = await Promise.all([web.url(8000), web.url(8000)])
      expect(again).toBe(url)
      expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/)
      const res = await fetch(new URL('hostname', url))
      expect(res.status).toBe(200)
      expect((await res.text()).length).toBeGreaterThan(0)
      const hostPort = Number(new URL(url).port)
      expect(web.services).toEqual([{ port: 8000, hostPort, url }])
      expect((await web.info()).services).toEqual([{ port: 8000, hostPort, url }])
      expect((await errorOf(web.url(70000))).code).toBe('S001')
      await web.stop()
      expect(web.services).toEqual([])
    } finally {
      if (web.status !== 'destroyed') await web.stop()
    }
  })
})

describe('004 fs::grep: "Lines longer than max_line_bytes are truncated with …"', () => {
  it('a match line cut at maxLineBytes ends with a single …', async () => {
    await sb.fs.writeFile('/workspace/seed-grep.txt', `${'a'.repeat(100)} needle\nshort needle\n`)
    const { matches } = await sb.fs.grep('/workspace/seed-grep.txt', 'needle', { maxLineBytes: 16 })
    expect(matches.map((m) => m.content)).toEqual([`${'a'.repeat(16)}…`, 'short needle'])
  })
})

describe('stop() (a deliberate difference from 004 sandbox::stop: docs/api.md)', () => {
  it('resolves { sandboxId, stopped: true } when it ends the sandbox; a second stop is S004', async () => {
    const once_ = await rt.create({ image: 'base', driver: 'namespace' })
    expect(await once_.stop()).toEqual({ sandboxId: once_.id, stopped: true })
    expect((await errorOf(once_.stop())).code).toBe('S004')
  })

  it('resolves { stopped: false } for a sandbox that had ended by itself', async () => {
    const idle = await rt.create({ image: 'base', driver: 'namespace', idleTimeoutMs: 1000 })
    await once(idle, 'destroyed')
    expect(await idle.stop()).toEqual({ sandboxId: idle.id, stopped: false })
  })
})

describe('000 "Run vs start": run "accepts collect and collectOn to export artifacts when the command finishes"; "start doesn\'t accept collect or collectOn"', () => {
  const tarList = (file: string) => execFileSync('tar', ['-tf', file], { encoding: 'utf8' }).trim().split('\n').sort()
  let to: string
  beforeAll(() => {
    to = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-collect-'))
  })
  afterAll(() => fs.rmSync(to, { recursive: true, force: true }))

  it('exec exports the globs and directories it lists when the command ends, with the record shape of sandbox artifacts', async () => {
    const script =
      'mkdir -p /workspace/c1/out /workspace/c1/report/sub && printf 1 > /workspace/c1/out/a.json && printf 22 > /workspace/c1/out/b.json && printf x > /workspace/c1/out/c.txt && printf 333 > /workspace/c1/report/sub/r.txt && ln -s /etc/hostname /workspace/c1/report/link && ln /workspace/c1/report/sub/r.txt /workspace/c1/report/sub/s.txt'
    const r = await sb.exec('sh', ['-c', script], {
      collect: { paths: ['/workspace/c1/out/*.json', '/workspace/c1/report'], to },
    })
    expect(r.exitCode).toBe(0)
    const cmdId = path.basename(r.artifacts!.tar, '.tar')
    expect(r.artifacts).toEqual({
      tar: path.join(to, `${cmdId}.tar`),
      files: ['/workspace/c1/out/a.json', '/workspace/c1/out/b.json', '/workspace/c1/report/sub/r.txt'],
      bytes: 6,
      truncated: false,
      error: null,
      message: null,
    })
    expect(tarList(r.artifacts!.tar).map((n) => n.replace(/\/$/, ''))).toEqual([
      'workspace/c1/out/a.json',
      'workspace/c1/out/b.json',
      'workspace/c1/report',
      'workspace/c1/report/link',
      'workspace/c1/report/sub',
      'workspace/c1/report/sub/r.txt',
      'workspace/c1/report/sub/s.txt',
    ])
    const unpacked = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-collect-x-'))
    execFileSync('tar', ['-xf', r.artifacts!.tar, '-C', unpacked])
    // The hard link stays a link to its sibling, moved under the match with it.
    const r1 = fs.statSync(path.join(unpacked, 'workspace/c1/report/sub/r.txt'))
    expect(fs.readFileSync(path.join(unpacked, 'workspace/c1/report/sub/s.txt'), 'utf8')).toBe('333')
    expect(fs.statSync(path.join(unpacked, 'workspace/c1/report/sub/s.txt')).ino).toBe(r1.ino)
    fs.rmSync(unpacked, { recursive: true, force: true })
    expect(execFileSync('tar', ['-tvf', r.artifacts!.tar, 'workspace/c1/report/link'], { encoding: 'utf8' })).toContain(
      '-> /etc/hostname',
    )
    expect(JSON.parse(fs.readFileSync(path.join(to, `${cmdId}.json`), 'utf8'))).toMatchObject({
      files: r.artifacts!.files,
      bytes: 6,
      error: null,
    })
  })

  it('collectOn decides: on_failure skips a success (artifacts null), on_success skips a failure; maxBytes keeps what fits (S403)', async () => {
    const ok = await sb.exec('sh', ['-c', 'mkdir -p /workspace/c2 && printf abc > /workspace/c2/f'], {
      collect: { paths: ['/workspace/c2'], to },
      collectOn: 'on_failure',
    })
    expect(ok.artifacts).toBeNull()
    const bad = await sb.exec('sh', ['-c', 'exit 3'], {
      collect: { paths: ['/workspace/c2'], to },
      collectOn: 'on_success',
    })
    expect(bad.artifacts).toBeNull()
    const failed = await sb.exec('sh', ['-c', 'printf 0123456789 > /workspace/c2/g; exit 3'], {
      collect: { paths: ['/workspace/c2/*'], to, maxBytes: 5 },
      collectOn: 'on_failure',
    })
    expect(failed.artifacts).toMatchObject({ files: ['/workspace/c2/f'], bytes: 3, truncated: true, error: 'S403' })
    expect(tarList(failed.artifacts!.tar)).toEqual(['workspace/c2/f'])
  })

  it('start refuses collect and collectOn (S001 naming them); exec checks them before the command runs', async () => {
    for (const bad of [{ collect: { paths: ['/workspace'], to } }, { collectOn: 'always' }]) {
      const err = await errorOf(Promise.resolve().then(() => sb.start('true', [], bad as never)))
      expect(err.code).toBe('S001')
      expect(err.message).toContain(Object.keys(bad)[0])
    }
    const relative = await errorOf(
      sb.exec('touch', ['/workspace/never-ran'], { collect: { paths: ['workspace'], to } }),
    )
    expect(relative.code).toBe('S001')
    expect(relative.message).toContain('collect.paths[0]')
    expect((await errorOf(sb.exec('true', [], { collectOn: 'always' }))).message).toContain('collectOn')
    expect(
      (await errorOf(sb.exec('true', [], { collect: { paths: ['/a'], to }, collectOn: 'sometimes' as never }))).message,
    ).toContain('collectOn')
    await expect(sb.fs.stat('/workspace/never-ran')).rejects.toMatchObject({ code: 'S211' })
  })
})
