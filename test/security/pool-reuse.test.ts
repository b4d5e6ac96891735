/**
 * A reuse pool (pool option `reuse`) hands a stopped lease's sandbox to the next acquire after a
 * reset (lib/pool-reset.ts, native/src/reset, agent/reset.go). Root in the sandbox with every
 * capability a sandbox may give tries to leave something for the next lease: processes of every
 * kind, files anywhere, SysV and POSIX IPC objects, a listening and a TIME_WAIT socket; the old
 * holder keeps its handle and token. The next lease of the same sandbox finds none of it. A reset
 * that fails destroys the member; it is never offered.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import v8 from 'node:v8'
import vm from 'node:vm'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import type { CreateOptions } from '../../lib/create-options.js'
import type { SandboxPool } from '../../lib/pool.js'
import { AgentConnection } from '../../lib/protocol/client.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { PoolLeases, staticProgram } from '../helpers/pool-leases.js'
import { mountsMentioning, processesLeft, runtimesClosedAfterAll } from '../helpers/runtime.js'
import { leftoverCgroupDirs } from '../../lib/reaper.js'
import { resetHelperPath } from '../../lib/native.js'
import { Runtime, runtimeState } from '../../lib/runtime.js'

const SHAPE: CreateOptions = { image: 'base', capabilities: ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'SETUID', 'SETGID'] }
const runtime = runtimesClosedAfterAll()
const rt = runtime({ maxConcurrentSandboxes: 80 })
let pool: SandboxPool
let leases: PoolLeases
let probe: Buffer
let buildDir: string
beforeAll(async () => {
  buildDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-pool-reuse-'))
  probe = staticProgram(path.join(import.meta.dirname, 'fixtures/pool-reuse-probe.c'))
  pool = rt.pool({ ...SHAPE, size: 1, reuse: true })
  leases = new PoolLeases(rt, pool, SHAPE)
  await pool.full()
}, 60_000)
afterAll(() => fs.rmSync(buildDir, { recursive: true, force: true }))

const sh = (sb: Sandbox, script: string) => sb.exec('sh', ['-c', script])

async function withProbe(sb: Sandbox, args: string): Promise<string> {
  await sb.fs.writeFile('/workspace/.probe', probe, { mode: 0o755 })
  const r = await sh(sb, `/workspace/.probe ${args}; s=$?; rm /workspace/.probe; exit $s`)
  expect(r.exitCode).toBe(0)
  return r.stdout
}

describe('pool reuse', () => {
  // A failed assertion must not leave the pool's one member leased (the next test would wait for it).
  afterEach(() => leases.stopAll())
  it('pool reuse: processes a lease leaves (daemonized, setsid, another uid, ignoring signals, stopped) are refused/held', async () => {
    const first = await leases.lease()
    const detached = [
      '(sleep 1001 </dev/null >/dev/null 2>&1 &) &',
      'setsid sleep 1002 </dev/null >/dev/null 2>&1 &',
      'sh -c \'trap "" TERM INT HUP; exec sleep 1004\' </dev/null >/dev/null 2>&1 &',
      'sleep 1005 </dev/null >/dev/null 2>&1 & kill -STOP $!',
    ]
    expect((await sh(first, detached.join('\n'))).exitCode).toBe(0)
    const other = await first.exec('sh', ['-c', 'setsid sleep 1003 </dev/null >/dev/null 2>&1 &'], { user: '1234' })
    expect(other.exitCode).toBe(0)
    const seen = (await sh(first, 'ps -o pid,user,stat,args')).stdout
    for (const n of ['sleep 1001', 'sleep 1002', '1234 ', 'sleep 1004', 'sleep 1005']) expect(seen).toContain(n)
    expect(seen).toMatch(/^ *\d+ +\S+ +T\S* .*1005/m) // stopped

    const next = await leases.next(first)
    const ps = (await sh(next, 'ps -o pid,args')).stdout
    const others = ps.split('\n').filter((l) => l.trim() && !/PID|krunbox\/agent|ps -o/.test(l))
    expect(others).toEqual([])
    await next.stop()
  }, 60_000)

  it('pool reuse: files a lease writes anywhere, and a chmod of an image file, are refused/held', async () => {
    const first = await leases.lease()
    const planted = [
      '/evil',
      '/etc/evil',
      '/tmp/evil',
      '/workspace/evil',
      '/root/evil',
      '/dev/shm/evil',
      '/dev/evil',
      '/usr/bin/evil',
    ]
    const plant = planted.map((p) => `echo evil > ${p}`).join(' && ')
    expect(
      (await sh(first, `${plant} && chmod 4777 /bin/busybox && chmod 600 /etc/passwd && chmod 700 /workspace`))
        .exitCode,
    ).toBe(0)

    const next = await leases.next(first)
    const files = await sh(
      next,
      `for f in ${planted.join(' ')}; do [ -e $f ] && echo left $f; done; stat -c %a /bin/busybox /etc/passwd /workspace`,
    )
    expect(files.stdout.trim().split('\n')).toEqual(['755', '644', '777'])
    expect((await sh(next, 'ls -A /tmp /dev/shm /workspace | grep -v :')).stdout.trim()).toBe('')
    await next.stop()
  }, 60_000)

  it('pool reuse: SysV shm, semaphore and message queue, a POSIX queue, a listening and a TIME_WAIT socket are refused/held', async () => {
    const first = await leases.lease()
    expect((await sh(first, 'nc -l -p 7777 </dev/null >/dev/null 2>&1 &')).exitCode).toBe(0)
    await withProbe(first, 'leave')
    // The attack is real: all of it is there before the stop.
    expect(await withProbe(first, 'check')).toMatch(/shm=1 sem=1 msg=1 mqueue=1 bind7777=0 bind7778=0 tcp=[1-9]/)

    const next = await leases.next(first)
    expect(await withProbe(next, 'check')).toMatch(/shm=0 sem=0 msg=0 mqueue=0 bind7777=1 bind7778=1 tcp=0/)
    await next.stop()
  }, 60_000)

  it("pool reuse: the old holder's handle and token are refused", async () => {
    const first = await leases.lease()
    expect((await first.exec('true')).exitCode).toBe(0)
    const oldToken = first.accessToken!
    const socket = path.join(runtimeState(rt).controlDir(first.id), 'agent.sock')
    // Another process of the old holder attached with the token: its connection ends at the reset.
    const attached = await rt.attach(first.id, { accessToken: oldToken })
    const next = await leases.next(first)
    await expect(first.exec('true')).rejects.toMatchObject({ code: 'S004' })
    await expect(attached.exec('true')).rejects.toBeInstanceOf(SandboxError)
    await expect(rt.attach(first.id, { accessToken: oldToken })).rejects.toMatchObject({ code: 'S005' })
    // Straight to the agent's socket, past the host's record check.
    await expect(AgentConnection.connect(socket, { token: oldToken })).rejects.toBeInstanceOf(SandboxError)
    const again = await rt.attach(next.id, { accessToken: next.accessToken! })
    expect((await again.exec('echo', ['ok'])).stdout).toBe('ok\n')
    await next.stop()
  }, 60_000)

  it('pool reuse: 64 concurrent acquire → exec → stop cycles on a reuse pool are held', async () => {
    const shape = { ...SHAPE, env: { POOL: 'big' } }
    const big = rt.pool({ ...shape, size: 4, reuse: true })
    await big.full()
    // 16 workers, 4 cycles each: stops, resets and acquires race; every lease must find a clean
    // sandbox with the shape's env, whether a reused member, a fresh one or a fallback create.
    const leases = await Promise.all(
      Array.from({ length: 16 }, async (_, w) => {
        const seen: string[] = []
        for (let i = 0; i < 4; i++) {
          const sb = await rt.acquire(shape)
          try {
            const r = await sb.exec('sh', [
              '-c',
              `cat /workspace/mark /tmp/mark 2>/dev/null; echo ${w}-${i} | tee /workspace/mark > /tmp/mark; echo $POOL`,
            ])
            seen.push(r.stdout)
          } finally {
            await sb.stop()
          }
        }
        return seen
      }),
    )
    expect(leases.flat()).toEqual(Array(64).fill('big\n'))
    expect(big.stats.reuses).toBeGreaterThan(0)
    expect(big.stats.resetFailures).toBe(0)
    await big.close()
  }, 120_000)
})

/** The heap in use after a full collection (V8's gc() made reachable for this measure). */
function heapAfterGc(): number {
  v8.setFlagsFromString('--expose-gc')
  ;(vm.runInNewContext('gc') as () => void)()
  return process.memoryUsage().heapUsed
}

describe('pool reuse over a long life', () => {
  it('pool reuse: 1 000 leases of one member hold host memory and the sandbox cgroup memory flat', async () => {
    const shape = { ...SHAPE, env: { POOL: 'long' } }
    const long = rt.pool({ ...shape, size: 1, reuse: true, maxReuses: 2000 })
    await long.full()
    const memory = (id: string) => {
      const dirs = runtimeState(rt).read(id)?.cgroupDirs ?? []
      // The sandbox's own memory cgroup (agent and workload): v2's memory.current, v1's usage_in_bytes.
      const top = dirs.filter((d) => d.endsWith(id))
      const file = top
        .flatMap((d) => [path.join(d, 'memory.current'), path.join(d, 'memory.usage_in_bytes')])
        .find((f) => fs.existsSync(f))
      return file ? Number(fs.readFileSync(file, 'utf8')) : null
    }
    let id = ''
    const samples: { cgroup: number | null; heap: number }[] = []
    for (let i = 0; i < 1000; i++) {
      while (long.stats.ready === 0) await new Promise((resolve) => long.once('member', resolve))
      const sb = await rt.acquire(shape)
      id ||= sb.id
      expect(sb.id).toBe(id) // the same sandbox all along
      // Each lease leaves 1 MiB in /tmp and a file in the root's layer: a reset that kept any old root would grow.
      if (i % 10 === 0) await sb.exec('sh', ['-c', 'head -c 1048576 /dev/urandom > /tmp/blob; echo x > /etc/leak'])
      if (i === 100 || i === 999) samples.push({ cgroup: memory(id), heap: heapAfterGc() })
      await sb.stop()
    }
    expect(long.stats.reuses).toBeGreaterThanOrEqual(999)
    expect(long.stats.resetFailures).toBe(0)
    const [early, late] = samples
    // 90 leases left 1 MiB each in /tmp between the samples: a kept root would show 90 MiB.
    if (early.cgroup !== null && late.cgroup !== null) expect(late.cgroup - early.cgroup).toBeLessThan(4 << 20)
    // Each ended handle kept alive by its sandbox's exit cost ~11 KiB: 10 MiB over these leases.
    expect(late.heap - early.heap).toBeLessThan(4 << 20)
    await long.close()
  }, 180_000)
})

describe('pool reuse and a host SIGKILLed mid-reset', () => {
  it('pool reuse: a host SIGKILLed while it resets a member leaves nothing the next Runtime does not sweep', async () => {
    const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-reuse-kill-'))
    try {
      const child = spawn(
        process.execPath,
        ['--import', 'tsx', path.join(import.meta.dirname, 'fixtures/pool-reuse-host.ts'), stateDir],
        {
          stdio: ['ignore', 'pipe', 'inherit'],
        },
      )
      const exited = new Promise((resolve) => child.once('exit', resolve))
      // The third stop: two resets done, the third one under way when the signal lands.
      let stops = 0
      const id = await new Promise<string>((resolve) => {
        child.stdout!.on('data', (chunk: Buffer) => {
          for (const line of chunk.toString().split('\n')) {
            const m = /^stopping (\S+)$/.exec(line)
            if (m && ++stops === 3) {
              child.kill('SIGKILL')
              resolve(m[1])
            }
          }
        })
      })
      await exited
      const rt = new Runtime({ stateDir })
      try {
        await expect
          .poll(() => (rt.sweep(), fs.readdirSync(stateDir).filter((n) => n === id)), {
            timeout: 15_000,
            interval: 100,
          })
          .toEqual([])
      } finally {
        await rt.close()
      }
      expect(leftoverCgroupDirs(id)).toEqual([])
      expect(await processesLeft(id)).toEqual([])
      expect(mountsMentioning(id)).toEqual([])
    } finally {
      fs.rmSync(stateDir, { recursive: true, force: true })
    }
  }, 60_000)
})

describe('krunbox-reset given a process that is not a sandbox', () => {
  it.skipIf(process.getuid?.() !== 0)(
    "pool reuse: the helper pointed at PID 1 of a pid namespace in the host's user namespace is refused (reset and record)",
    async () => {
      // What a reused pid could make it see: a namespace init that shares the host's other namespaces.
      const parent = spawn('unshare', ['--pid', '--fork', '--kill-child', 'sleep', '60'], { stdio: 'ignore' })
      try {
        const children = `/proc/${parent.pid}/task/${parent.pid}/children`
        await expect.poll(() => fs.readFileSync(children, 'utf8').trim(), { timeout: 10_000, interval: 5 }).not.toBe('')
        // A reset (with a record of the right form) and a record alike.
        const record = `limits=${Array(16).fill('0:0').join(',')};oom_score_adj=0;coredump_filter=33;autogroup=0`
        for (const args of [
          [String(parent.pid), '/', '16', record],
          ['--record', String(parent.pid)],
        ]) {
          const r = spawnSync(resetHelperPath(), args, { encoding: 'utf8' })
          expect(r.status).toBe(1)
          expect(r.stderr).toMatch(/shares the host's user namespace/)
        }
      } finally {
        parent.kill('SIGKILL')
      }
    },
  )
})

describe('pool reuse options', () => {
  it('pool reuse: a shape the reset cannot rebuild (krun, network, a non-boolean) is refused with S001 naming reuse', () => {
    for (const bad of [
      { reuse: true, driver: 'krun' },
      { reuse: true, network: { allow: ['example.org'] } },
      { reuse: 'yes' },
    ]) {
      let error: unknown
      try {
        rt.pool({ image: 'base', size: 1, ...bad } as never)
      } catch (e) {
        error = e
      }
      expect(error).toBeInstanceOf(SandboxError)
      expect(error).toMatchObject({ code: 'S001', message: expect.stringContaining('reuse') })
    }
  })
})

describe('pool reuse with an agent that cannot reset', () => {
  let fakeRt: ReturnType<typeof runtime>
  beforeAll(() => {
    execFileSync('go', ['build', '-o', path.join(buildDir, 'fake-agent'), '.'], {
      cwd: path.join(import.meta.dirname, '..', 'fixtures', 'fake-agent'),
      env: { ...process.env, CGO_ENABLED: '0' },
    })
  }, 120_000)

  it('pool reuse: a reset the agent answers wrongly (an older agent: unknown op) destroys the member, never offered', async () => {
    const before = process.env.KRUNBOX_AGENT_PATH
    process.env.KRUNBOX_AGENT_PATH = path.join(buildDir, 'fake-agent')
    try {
      fakeRt = runtime({})
      const fakePool = fakeRt.pool({ ...SHAPE, size: 1, reuse: true })
      await fakePool.full()
      const fakeLeases = new PoolLeases(fakeRt, fakePool, SHAPE)
      const first = await fakeLeases.lease()
      const dir = runtimeState(fakeRt).sandboxDir(first.id)
      const failed = new Promise<void>((resolve) => {
        const check = () => (fakePool.stats.resetFailures > 0 ? resolve() : fakePool.once('member', check))
        fakePool.once('member', check)
      })
      await first.stop()
      await failed
      expect(fakePool.stats).toMatchObject({ resetFailures: 1, reuses: 0 })
      expect(fs.existsSync(dir)).toBe(false) // destroyed, state removed
      const second = await fakeLeases.lease()
      expect(second.id).not.toBe(first.id)
      await fakeLeases.stopAll()
    } finally {
      if (before === undefined) delete process.env.KRUNBOX_AGENT_PATH
      else process.env.KRUNBOX_AGENT_PATH = before
    }
  }, 60_000)
})
