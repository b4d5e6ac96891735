/** A real agent in a real bubblewrap sandbox, driven through the public API. (Issue 2.) */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import { bubblewrapPath } from '../../lib/paths.js'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { mountsMentioning, processesLeft, processesMentioning, testRuntime } from '../helpers/runtime.js'
import { runtimeState } from '../../lib/runtime.js'

let rt: Runtime
let sb: Sandbox

beforeAll(async () => {
  rt = testRuntime()
  sb = await rt.create({ image: 'base', driver: 'namespace' })
})
afterAll(async () => {
  await rt.close()
})

describe('exec', () => {
  it('reports exit codes, keeps stdout and stderr apart, applies env and cwd', async () => {
    const r = await sb.exec('sh', ['-c', 'echo hi; echo oops >&2; echo "$A"; pwd; exit 3'], {
      timeoutMs: 5000,
      env: { A: 'one' },
      cwd: '/tmp',
    })
    expect(r).toMatchObject({
      stdout: 'hi\none\n/tmp\n',
      stderr: 'oops\n',
      exitCode: 3,
      signal: null,
      timedOut: false,
      success: false,
      status: 'exited',
    })
    expect(r.durationMs).toBeGreaterThanOrEqual(0)
    const ok = await sb.exec('true')
    expect(ok.success).toBe(true)
    expect(ok.exitCode).toBe(0)
  })

  it('reports a terminating signal separately from the exit code', async () => {
    const r = await sb.exec('sh', ['-c', 'kill -9 $$'])
    expect(r.exitCode).toBeNull()
    expect(r.signal).toBe('SIGKILL')
    expect(r.success).toBe(false)
  })

  it('returns binary output byte-exact with encoding: buffer', async () => {
    const r = await sb.exec('sh', ['-c', "printf '\\000\\001\\377\\376abc\\n'"], { encoding: 'buffer' })
    expect(Buffer.isBuffer(r.stdout)).toBe(true)
    expect([...r.stdout]).toEqual([0, 1, 255, 254, 97, 98, 99, 10])
  })

  it('delivers 64 MiB of output intact', async () => {
    const r = await sb.exec(
      'sh',
      ['-c', 'head -c 67108864 /dev/urandom > /tmp/big && sha256sum /tmp/big >&2 && cat /tmp/big'],
      { encoding: 'buffer', timeoutMs: 120_000 },
    )
    expect(r.stdout.length).toBe(64 * 1024 * 1024)
    const inside = r.stderr.toString().split(' ')[0]
    expect(crypto.createHash('sha256').update(r.stdout).digest('hex')).toBe(inside)
    expect(r.stdoutTruncated).toBe(false)
  }, 180_000)

  it('delivers stdin from a string and a Buffer', async () => {
    expect((await sb.exec('cat', [], { stdin: 'from a string' })).stdout).toBe('from a string')
    const bytes = crypto.randomBytes(300_000)
    const r = await sb.exec('sha256sum', [], { stdin: bytes })
    expect(r.stdout.split(' ')[0]).toBe(crypto.createHash('sha256').update(bytes).digest('hex'))
  })

  it('times out sleep 100 at 500 ms, even with a background child holding stdout, and leaves nothing running', async () => {
    for (const script of ['sleep 100', 'sleep 100 & sleep 100']) {
      const t0 = Date.now()
      const r = await sb.exec('sh', ['-c', script], { timeoutMs: 500 })
      const took = Date.now() - t0
      expect(r.timedOut).toBe(true)
      expect(r.status).toBe('timed_out')
      expect(took).toBeLessThan(2000)
    }
    // A timed-out command is reported once its whole process group is gone: no wait needed.
    const ps = await sb.exec('sh', [
      '-c',
      'for p in /proc/[0-9]*; do cat $p/cmdline 2>/dev/null | tr "\\0" " "; echo; done',
    ])
    expect(ps.stdout).not.toContain('sleep 100')
  })

  it('reports exit when the process exits, not when a grandchild closes the pipe', async () => {
    const t0 = Date.now()
    const r = await sb.exec('sh', ['-c', 'sleep 30 & echo done'], { timeoutMs: 20_000 })
    expect(r.stdout).toBe('done\n')
    expect(r.exitCode).toBe(0)
    expect(Date.now() - t0).toBeLessThan(2000)
  })
})

describe('isolation', () => {
  it('cannot see the project directory or host paths outside its image', async () => {
    const here = path.resolve('.')
    const r = await sb.exec('sh', ['-c', `ls ${here} 2>&1; cat /etc/hostname; ls /krunbox 2>&1; ls /root/.cache 2>&1`])
    expect(r.stdout).toContain('No such file or directory')
    expect(r.stdout).not.toContain('package.json')
    // The host's files are not the sandbox's: its /etc comes from the image.
    expect(fs.existsSync(here)).toBe(true)
  })

  it('has only the loopback interface and a hostname of its own', async () => {
    const net = await sb.exec('cat', ['/proc/net/dev'])
    const ifaces = net.stdout
      .split('\n')
      .slice(2)
      .filter(Boolean)
      .map((l) => l.split(':')[0].trim())
    expect(ifaces).toEqual(['lo'])
    const h = await sb.exec('hostname')
    expect(h.stdout.trim()).toBe(`sb-${sb.id.slice(0, 8)}`)
  })

  it("is monitored by the distribution's bubblewrap (or KRUNBOX_BWRAP), never a build of ours", () => {
    const pid = runtimeState(rt).read(sb.id)!.pid
    expect(fs.readlinkSync(`/proc/${pid}/exe`)).toBe(fs.realpathSync(bubblewrapPath()!))
  })

  it('runs the workload without capabilities', async () => {
    const r = await sb.exec('sh', ['-c', 'grep -E "^Cap(Eff|Prm|Bnd)" /proc/self/status'])
    for (const line of r.stdout.trim().split('\n')) expect(line).toMatch(/:\s+0+$/)
  })

  it('keeps writes private: a file under /usr is absent from a second sandbox and from the image after stop', async () => {
    const first = await rt.create({ image: 'base', driver: 'namespace' })
    const w = await first.exec('sh', ['-c', 'echo secret > /usr/krunbox-probe && cat /usr/krunbox-probe'])
    expect(w.stdout).toBe('secret\n')
    const second = await rt.create({ image: 'base', driver: 'namespace' })
    const r = await second.exec('sh', ['-c', 'cat /usr/krunbox-probe'])
    expect(r.exitCode).not.toBe(0)
    await first.stop()
    await second.stop()
    const image = await rt.images.resolve('base')
    expect(fs.existsSync(path.join(image.rootfs, 'usr', 'krunbox-probe'))).toBe(false)
  })
})

describe('stop and failures', () => {
  it('stops a sandbox declared with await using when the scope ends', async () => {
    let id = ''
    {
      await using scoped = await rt.create({ image: 'base', driver: 'namespace' })
      id = scoped.id
      expect((await scoped.exec('echo', ['in scope'])).stdout).toBe('in scope\n')
    }
    expect(fs.existsSync(runtimeState(rt).sandboxDir(id))).toBe(false)
    expect(await processesLeft(id)).toEqual([])
  })

  it('stop() leaves no process, mount, socket, cgroup or state directory, and a second stop fails with S004', async () => {
    const s = await rt.create({ image: 'base', driver: 'namespace' })
    const dir = runtimeState(rt).sandboxDir(s.id)
    expect(fs.existsSync(path.join(dir, 'ctl', 'agent.sock'))).toBe(true)
    expect(processesMentioning(s.id).length).toBeGreaterThan(0)
    const cgroups = runtimeState(rt).read(s.id)!.cgroupDirs
    await s.exec('sh', ['-c', 'sleep 60 & exit 0'])
    await s.stop()
    expect(s.status).toBe('destroyed')
    expect(s.destroyedReason).toBe('user_killed')
    expect(await processesLeft(s.id)).toEqual([])
    expect(mountsMentioning(s.id)).toEqual([])
    expect(fs.existsSync(dir)).toBe(false)
    for (const c of cgroups) expect(fs.existsSync(c)).toBe(false)
    await expect(s.stop()).rejects.toMatchObject({ code: 'S004' })
    await expect(s.exec('true')).rejects.toMatchObject({ code: 'S004' })
    expect(() => s.start('true')).toThrow(SandboxError)
    await expect(s.fs.ls('/')).rejects.toMatchObject({ code: 'S004' })
  })

  it('rejects a running exec promptly with S205 when the sandbox process is SIGKILLed', async () => {
    const s = await rt.create({ image: 'base', driver: 'namespace' })
    const pid = runtimeState(rt).read(s.id)!.pid
    const running = s.exec('sleep', ['50'], { timeoutMs: 60_000, env: { TEST_RUN_MARK: s.id } })
    // Running: the command's process, marked with the sandbox's id, is there.
    const deadline = Date.now() + 10_000
    while (processesMentioning(`TEST_RUN_MARK=${s.id}`).length === 0 && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 10))
    expect(processesMentioning(`TEST_RUN_MARK=${s.id}`)).toHaveLength(1)
    const t0 = Date.now()
    process.kill(pid, 'SIGKILL')
    const err = await running.catch((e) => e)
    expect(err).toBeInstanceOf(SandboxError)
    expect(err.code).toBe('S205')
    expect(Date.now() - t0).toBeLessThan(2000)
    await s.waitFor('destroyed', { timeoutMs: 5000 })
    expect(s.destroyedReason).toBe('crashed')
    expect(await processesLeft(s.id)).toEqual([])
  })
})

describe('argument validation', () => {
  const cases: Array<[string, () => unknown, string]> = [
    ['exec without a command', () => sb.exec(undefined as never), 'S001'],
    ['exec with a non-array args', () => sb.exec('ls', 'x' as never), 'S001'],
    ['exec with a negative timeout', () => sb.exec('true', [], { timeoutMs: -1 }), 'S003'],
    ['exec with a timeout over a week', () => sb.exec('true', [], { timeoutMs: 7 * 24 * 3600_000 + 1 }), 'S003'],
    ['exec with a relative cwd', () => sb.exec('true', [], { cwd: 'tmp' }), 'S001'],
    ['exec with a reserved env key', () => sb.exec('true', [], { env: { KRUNBOX_X: '1' } }), 'S006'],
    ['exec with a non-string env value', () => sb.exec('true', [], { env: { A: 1 as never } }), 'S001'],
    ['exec with an unknown option', () => sb.exec('true', [], { tiemout: 5 } as never), 'S001'],
    ['exec with a stream as stdin', () => sb.exec('true', [], { stdin: {} as never }), 'S001'],
    ['exec with a bad encoding', () => sb.exec('true', [], { encoding: 'latin1' as never }), 'S001'],
    ['create with an unknown driver', () => rt.create({ driver: 'docker' as never }), 'S001'],
    ['create with cpus 0', () => rt.create({ cpus: 0 }), 'S003'],
    ['create with an unknown image', () => rt.create({ image: 'nope' }), 'S101'],
    ['create with bad metadata', () => rt.create({ metadata: { 'bad key': 'x' } }), 'S007'],
    ['create with krun on this host', () => rt.create({ driver: 'krun' }), 'S301'],
    ['waitFor an unknown status', () => sb.waitFor('bogus' as never), 'S001'],
    ['fs.ls of a relative path', () => sb.fs.ls('etc'), 'S210'],
  ]
  for (const [what, call, code] of cases) {
    it(`${what} → ${code}`, async () => {
      let err: unknown
      try {
        await call()
      } catch (e) {
        err = e
      }
      expect(err).toBeInstanceOf(SandboxError)
      expect((err as SandboxError).code).toBe(code)
      expect((err as SandboxError).message.length).toBeGreaterThan(10)
    })
  }
})
