/**
 * A normal user in the sandbox. Presets have `sandbox` (uid 1000); commands run
 * as a name, "uid" or "uid:gid", per command or for the whole sandbox, and never hold a
 * capability whoever they run as. A host user without subordinate ids gets a coded error; one
 * with them (nobody, given a range for the test) gets the same 65 536 ids a root host gives.
 * (Issue 15, point 4.)
 */
import fs from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { asNobody, asRoot, checkoutUnreachable, NOBODY } from '../helpers/rootless.js'
import { mountsMentioning, processesMentioning, testRuntime } from '../helpers/runtime.js'
import { holdingSubordinateIdFiles, withSubordinateIds } from '../helpers/subids.js'
import { until } from '../native/helpers.js'

let rt: Runtime
let sb: Sandbox
beforeAll(async () => {
  rt = testRuntime()
  sb = await rt.create({ image: 'base', driver: 'namespace' })
}, 120_000)
afterAll(async () => {
  await rt.close()
})

describe('commands as another user', () => {
  it("exec('id', [], { user: 'sandbox' }) runs as uid 1000 with its passwd home, and without capabilities", async () => {
    const r = await sb.exec('sh', ['-c', 'id -u; id -g; echo $HOME $USER; grep CapEff /proc/self/status'], {
      user: 'sandbox',
    })
    expect(r.stdout).toMatch(/^1000\n1000\n\/workspace sandbox\nCapEff:\s+0+\n$/)
    const root = await sb.exec('sh', ['-c', 'id -u; grep CapEff /proc/self/status'])
    expect(root.stdout).toMatch(/^0\nCapEff:\s+0+\n$/)
  })

  it('a command of root starts with every capability set empty, its bounding set included (execve could not regain one)', async () => {
    // The agent narrows the bounding set on the one thread that forks commands only (boot/caps.go).
    const r = await sb.exec('sh', ['-c', 'grep -E "^Cap(Inh|Prm|Eff|Bnd|Amb):" /proc/self/status'])
    expect(r.stdout).toMatch(/^CapInh:\s+0+\nCapPrm:\s+0+\nCapEff:\s+0+\nCapBnd:\s+0+\nCapAmb:\s+0+\n$/)
  })

  it('uid and uid:gid work without a passwd entry; files the user writes are its own', async () => {
    const r = await sb.exec('sh', ['-c', 'id -u; id -g; touch /workspace/mine; stat -c %u:%g /workspace/mine'], {
      user: '1234:5678',
    })
    expect(r.stdout).toBe('1234\n5678\n1234:5678\n')
    // The user cannot write what root owns.
    const denied = await sb.exec('sh', ['-c', 'echo x > /root/f'], { user: 'sandbox' })
    expect(denied.exitCode).not.toBe(0)
    expect(denied.stderr).toMatch(/denied/i)
  })

  it('a command as another user still ends at its timeout, on cancel() and on kill(): the agent may signal it', async () => {
    const timed = await sb.exec('sleep', ['30'], { user: 'sandbox', timeoutMs: 300 })
    expect(timed).toMatchObject({ timedOut: true, signal: 'SIGTERM' })
    const canceled = sb.start('sh', ['-c', 'echo started; exec sleep 30'], { user: '1234:1234' })
    for await (const chunk of canceled.logs()) if (chunk.data.toString().includes('started')) break
    await canceled.cancel({ mode: 'graceful', killGraceMs: 200 })
    expect(await canceled.wait()).toMatchObject({ status: 'canceled', signal: 'SIGTERM' })
    const killed = sb.start('sh', ['-c', 'trap "" TERM; echo started; while :; do sleep 1; done'], { user: 'sandbox' })
    for await (const chunk of killed.logs()) if (chunk.data.toString().includes('started')) break
    await killed.kill('SIGKILL')
    expect(await killed.wait()).toMatchObject({ signal: 'SIGKILL' })
  })

  it('an unknown name is S001 naming it; a malformed spec is refused before it is sent', async () => {
    await expect(sb.exec('id', [], { user: 'nosuchuser' })).rejects.toMatchObject({
      code: 'S001',
      message: expect.stringContaining('nosuchuser'),
    })
    expect(() => sb.start('id', [], { user: 'a b' })).toThrow(
      expect.objectContaining({ code: 'S001', message: expect.stringContaining('"a b"') }),
    )
  })

  it("create({ user }) sets every command's user; a command can still ask for root", async () => {
    const s = await rt.create({ image: 'base', driver: 'namespace', user: 'sandbox' })
    expect((await s.exec('id', ['-u'])).stdout).toBe('1000\n')
    expect((await s.exec('id', ['-u'], { user: 'root' })).stdout).toBe('0\n')
    await s.stop()
  })
})

const rootless = !asRoot || checkoutUnreachable !== null
const whyRootless = !asRoot ? 'not root: cannot run a fixture as nobody nor edit /etc/subuid' : checkoutUnreachable
describe.skipIf(rootless)(
  `a host user without subordinate ids${whyRootless ? ` (skipped: ${whyRootless})` : ''}`,
  () => {
    it('keeps one uid and says so with S226 when a command needs another', async () => {
      // Under shadow's lock, so a concurrent test cannot give nobody a range meanwhile.
      await holdingSubordinateIdFiles(async (files) => {
        expect(`${files.subuid}\n${files.subgid}`).not.toMatch(/^(nobody|65534):/m)
        const { result: r, cleanup } = await asNobody('user-rootless-child.ts')
        try {
          expect(r.uid).toBe(NOBODY)
          expect(r.root).toBe('0\n')
          expect(r.code).toBe('S226')
          expect(r.message).toMatch(/1000.*not mapped/)
        } finally {
          cleanup()
        }
      })
    }, 90_000)
  },
)

describe.skipIf(rootless)(`a host user with subordinate ids${whyRootless ? ` (skipped: ${whyRootless})` : ''}`, () => {
  it("maps 0 to the user and 1..65535 to its range only: uid 1000 is its range's, chown works with CHOWN, nothing is left", async () => {
    await withSubordinateIds('nobody', 65_536, async (start) => {
      const { work, result: r, cleanup } = await asNobody('user-subids-child.ts')
      try {
        expect(r.uid).toBe(NOBODY)
        // Exactly the user's own id and its listed range: no other host id is reachable.
        const line = (text: string) => text.trim().split(/\s+/).join(' ')
        expect(r.maps.trim().split('\n').map(line)).toEqual([
          `0 ${NOBODY} 1`,
          `1 ${start} 65535`,
          `0 ${NOBODY} 1`,
          `1 ${start} 65535`,
        ])
        expect(r.asSandbox).toBe('1000\n1000\n1000:1000\n')
        expect(r.chown).toBe('1000:1000\n')
        // The host sees uid 1000 as the range's id 999, for the process and for what it wrote.
        const host = start + 999
        expect(r.hostStatus).toEqual([
          expect.stringMatching(new RegExp(`^Uid:\\s+${host}\\s+${host}\\s+${host}\\s+${host}$`)),
          expect.stringMatching(new RegExp(`^Gid:\\s+${host}\\s`)),
        ])
        expect(r.hostFileOwner).toBe(`${host}:${host}`)
        // Past the 65 536 mapped ids there is still nothing.
        expect(r.unmapped).toBe('S226')
        // Nothing left: no process of the range or of the sandbox (its reaper notices the stop
        // within a second), no mount, no state entry.
        expect(processesWithUidIn(start, 65_536)).toEqual([])
        expect(await until(() => processesMentioning(work).length === 0, 10_000)).toBe(true)
        expect(mountsMentioning(work)).toEqual([])
        expect(fs.readdirSync(`${work}/state`).filter((n) => !n.startsWith('.'))).toEqual([])
      } finally {
        cleanup()
      }
    })
  }, 120_000)
})

/** Host processes whose real or effective uid is in [start, start + count). */
function processesWithUidIn(start: number, count: number): number[] {
  const out: number[] = []
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    try {
      const ids = fs.readFileSync(`/proc/${name}/status`, 'utf8').match(/^Uid:\s+(\d+)\s+(\d+)/m)
      if (ids && [ids[1], ids[2]].some((id) => Number(id) >= start && Number(id) < start + count))
        out.push(Number(name))
    } catch {}
  }
  return out
}

describe("capabilities given to the sandbox's root", () => {
  it.skipIf(!asRoot)(
    'chown works as root inside with CHOWN; another user and a sandbox without the option hold none',
    async () => {
      const withCaps = await rt.create({
        image: 'base',
        driver: 'namespace',
        capabilities: ['CHOWN', 'SETUID', 'SETGID'],
      })
      try {
        const r = await withCaps.exec('sh', [
          '-c',
          'touch /workspace/f && chown 1000:1000 /workspace/f && stat -c %u:%g /workspace/f; grep -E "^Cap(Eff|Bnd)" /proc/self/status',
        ])
        // CHOWN (bit 0), SETGID (6), SETUID (7): effective, and all the bounding set holds.
        expect(r.stdout).toMatch(/^1000:1000\nCapEff:\s+0+c1\nCapBnd:\s+0+c1\n$/)
        const asUser = await withCaps.exec(
          'sh',
          ['-c', 'grep CapEff /proc/self/status; chown 0 /workspace/f 2>&1 || echo refused'],
          { user: 'sandbox' },
        )
        expect(asUser.stdout).toMatch(/^CapEff:\s+0+\n.*\nrefused\n$/s)
      } finally {
        await withCaps.stop()
      }
      const without = await sb.exec('sh', ['-c', 'touch /workspace/g && chown 1000 /workspace/g 2>&1 || echo refused'])
      expect(without.stdout).toMatch(/refused\n$/)
    },
  )

  it('a name outside the list is S001 naming it, before anything boots', async () => {
    const err = await rt.create({ image: 'base', capabilities: ['CHOWN', 'SYS_ADMIN'] as never }).catch((e) => e)
    expect(err).toMatchObject({ code: 'S001', message: expect.stringContaining('"SYS_ADMIN"') })
    const notArray = await rt.create({ image: 'base', capabilities: 'CHOWN' as never }).catch((e) => e)
    expect(notArray).toMatchObject({ code: 'S001', message: expect.stringContaining('capabilities') })
  })
})

describe('ownership through the host API', () => {
  it('fs.chmod({ uid, gid }) gives a file to the sandbox user, who can then write it; commands still hold no capability', async () => {
    await sb.fs.writeFile('/workspace/given', 'root wrote this\n', { mode: 0o600 })
    const before = await sb.exec('sh', ['-c', 'echo more >> /workspace/given'], { user: 'sandbox' })
    expect(before.exitCode).not.toBe(0)
    await sb.fs.chmod('/workspace/given', { uid: 1000, gid: 1000 })
    const r = await sb.exec(
      'sh',
      ['-c', 'echo more >> /workspace/given && stat -c %u:%g /workspace/given && cat /workspace/given'],
      { user: 'sandbox' },
    )
    expect(r.stdout).toBe('1000:1000\nroot wrote this\nmore\n')
    const chownAsRoot = await sb.exec('chown', ['0', '/workspace/given'])
    expect(chownAsRoot.exitCode).not.toBe(0) // root's commands have no CAP_CHOWN: only the agent does
  })
})
