/**
 * A reuse pool (pool option `reuse`) hands a stopped lease's sandbox to the next acquire after a
 * reset (lib/pool-reset.ts, native/src/reset, agent/reset.go). Root in the sandbox with every
 * capability a sandbox may give tries to leave something for the next lease: processes of every
 * kind, files anywhere, SysV and POSIX IPC objects, a listening and a TIME_WAIT socket; the old
 * holder keeps its handle and token. The next lease of the same sandbox finds none of it.
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import type { SandboxPool } from '../../lib/pool.js'
import { AgentConnection } from '../../lib/protocol/client.js'
import { runtimeState } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'

const SHAPE = { image: 'base', capabilities: ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'SETUID', 'SETGID'] } as const
const rt = testRuntime({ maxConcurrentSandboxes: 80 })
let pool: SandboxPool
let probe: Buffer
afterAll(() => rt.close())
beforeAll(async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-probe-'))
  execFileSync('cc', ['-static', '-O1', '-o', `${dir}/probe`, path.join(__dirname, 'fixtures/pool-reuse-probe.c')])
  probe = fs.readFileSync(`${dir}/probe`)
  fs.rmSync(dir, { recursive: true, force: true })
  pool = rt.pool({ ...SHAPE, size: 1, reuse: true })
  await pool.full()
}, 60_000)

/** A lease of the pool's member (waiting for it to be back in the pool). */
async function lease(): Promise<Sandbox> {
  while (pool.stats.ready === 0) {
    if (pool.stats.resetFailures > 0) throw new Error('a reset failed')
    await new Promise((resolve) => pool.once('member', resolve))
  }
  const hits = pool.stats.hits
  const sb = await rt.acquire(SHAPE)
  expect(pool.stats.hits).toBe(hits + 1)
  return sb
}

/** The next lease of the same sandbox (the pool has one member and never boots another while it is leased). */
async function nextLease(previous: Sandbox): Promise<Sandbox> {
  const before = pool.stats.reuses
  await previous.stop()
  const sb = await lease()
  expect(pool.stats.reuses).toBe(before + 1)
  expect(sb.id).toBe(previous.id)
  expect(sb).not.toBe(previous)
  return sb
}

const sh = async (sb: Sandbox, script: string) => {
  const r = await sb.exec('sh', ['-c', script])
  return r
}

const LEAVE_PROCESSES = [
  '(sleep 1001 </dev/null >/dev/null 2>&1 &) &',
  'setsid sleep 1002 </dev/null >/dev/null 2>&1 &',
  "sh -c 'trap \"\" TERM INT HUP; exec sleep 1004' </dev/null >/dev/null 2>&1 &",
  'sleep 1005 </dev/null >/dev/null 2>&1 & kill -STOP $!',
  'nc -l -p 7777 </dev/null >/dev/null 2>&1 &',
].join('\n')

const PLANTED = ['/evil', '/etc/evil', '/tmp/evil', '/workspace/evil', '/root/evil', '/dev/shm/evil', '/dev/evil', '/usr/bin/evil']

describe('pool reuse', () => {
  it('pool reuse: processes, files, IPC objects and sockets a lease leaves are refused/held from the next lease', async () => {
    const first = await lease()
    await first.fs.writeFile('/workspace/probe', probe, { mode: 0o755 })
    expect((await sh(first, '/workspace/probe leave')).exitCode).toBe(0)
    expect((await sh(first, LEAVE_PROCESSES)).exitCode).toBe(0)
    // One as another uid, detached the same way.
    const other = await first.exec('sh', ['-c', 'setsid sleep 1003 </dev/null >/dev/null 2>&1 &'], { user: '1234' })
    expect(other.exitCode).toBe(0)
    const plant = PLANTED.map((p) => `echo evil > ${p}`).join(' && ')
    expect((await sh(first, `${plant} && chmod 4777 /bin/busybox && chmod 600 /etc/passwd`)).exitCode).toBe(0)
    // The attack is real: all of it is there before the stop.
    const seen = await sh(first, 'ps -o pid,user,stat,args; /workspace/probe check')
    for (const n of ['sleep 1001', 'sleep 1002', 'sleep 1003', 'sleep 1004', 'sleep 1005', 'nc -l'])
      expect(seen.stdout).toContain(n)
    expect(seen.stdout).toMatch(/shm=1 sem=1 msg=1 mqueue=1 bind7777=0 bind7778=0 tcp=[1-9]/)

    const next = await nextLease(first)
    const ps = await sh(next, 'ps -o pid,args')
    expect(ps.stdout).not.toMatch(/sleep|nc -l/)
    const others = ps.stdout.split('\n').filter((l) => l.trim() && !/PID|krunbox\/agent|ps -o/.test(l))
    expect(others).toEqual([])
    const files = await sh(next, `for f in ${PLANTED.join(' ')}; do [ -e $f ] && echo left $f; done; stat -c %a /bin/busybox /etc/passwd`)
    expect(files.stdout).not.toContain('left')
    expect(files.stdout.trim().split('\n')).toEqual(['755', '644'])
    await next.fs.writeFile('/workspace/probe', probe, { mode: 0o755 })
    const ipc = await sh(next, '/workspace/probe check')
    expect(ipc.stdout).toMatch(/shm=0 sem=0 msg=0 mqueue=0 bind7777=1 bind7778=1 tcp=0/)
    const ws = await sh(next, 'stat -c %a /workspace; ls -A /workspace /tmp /dev/shm')
    expect(ws.stdout.split('\n')[0]).toBe('777')
    await next.stop()
  }, 60_000)

  it("pool reuse: the old holder's handle and token are refused", async () => {
    const first = await lease()
    expect((await first.exec('true')).exitCode).toBe(0)
    const oldToken = first.accessToken!
    const socket = path.join(runtimeState(rt).controlDir(first.id), 'agent.sock')
    const next = await nextLease(first)
    await expect(first.exec('true')).rejects.toMatchObject({ code: 'S004' })
    const attach = rt.attach(first.id, { accessToken: oldToken })
    await expect(attach).rejects.toBeInstanceOf(SandboxError)
    await expect(attach).rejects.toMatchObject({ code: 'S005' })
    // Straight to the agent's socket, past the host's record check.
    await expect(AgentConnection.connect(socket, { token: oldToken })).rejects.toBeInstanceOf(SandboxError)
    const again = await rt.attach(next.id, { accessToken: next.accessToken! })
    expect((await again.exec('echo', ['ok'])).stdout).toBe('ok\n')
    await next.stop()
  }, 60_000)
})
