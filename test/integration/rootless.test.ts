/**
 * The namespace driver as an unprivileged host user (a child started from root with setpriv):
 * no cgroups (reported), the same sandbox, the same escape attempts held, and the host-side
 * safety of issues 20/21 (a record's pid recognised by start time and executable, a hostile
 * activity.json, a detached sandbox reaped at its TTL with no krunbox process left).
 */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { asNobody, asRoot, checkoutUnreachable, NOBODY } from '../helpers/rootless.js'
import { processesLeft } from '../helpers/runtime.js'

const title = 'as an unprivileged user (started from root with setpriv; the suite itself is unprivileged otherwise)'
describe.skipIf(!asRoot || checkoutUnreachable !== null)(
  `${title}${checkoutUnreachable ? ` (skipped: ${checkoutUnreachable})` : ''}`,
  () => {
    it('creates a sandbox, runs a command without capabilities, warns that limits are not enforced, stops', async () => {
      const { work, result: r, cleanup } = await asNobody('rootless-child.ts')
      try {
        expect(r.uid).toBe(NOBODY)
        expect(r.exitCode).toBe(0)
        expect(r.stdout).toMatch(/^0\nprivate\nCapEff:\s+0+\n$/)
        expect(r.status).toBe('destroyed')
        expect(r.warnings.join('\n')).toMatch(/not enforced by cgroups/)
        expect(fs.readdirSync(path.join(work, 'state')).filter((n) => !n.startsWith('.'))).toEqual([])
      } finally {
        cleanup()
      }
    }, 90_000)

    it('without a cgroup, the smallest pidsMax boots (RLIMIT_NPROC above the agent threads), runs commands and contains a fork bomb', async () => {
      const { result: r, cleanup } = await asNobody('rootless-pids-child.ts')
      try {
        // Before, the limit was pidsMax itself: the agent's own 8 reserve threads did not fit and it died at boot.
        expect(r).toMatchObject({ uid: NOBODY, pipeline: 'a\n', seven: 'spawned\n', after: 'still answers\n' })
        expect(r.bomb).toMatch(/can't fork/)
      } finally {
        cleanup()
      }
    }, 90_000)

    it('holds every escape attempt: nothing reaches the host, and the sandbox is root only inside', async () => {
      const { result: r, cleanup } = await asNobody('escape-child.ts', (work) => [path.join(work, 'marker')])
      try {
        expect(r.uid).toBe(NOBODY)
        expect(r.insideUid).toBe('0')
        for (const [name, result] of Object.entries(r.attempts as Record<string, { held: boolean; stdout: string }>)) {
          expect([name, result.held, result.stdout]).toEqual([name, true, result.stdout])
        }
        for (const [p, answer] of Object.entries(r.fsAnswers as Record<string, string>))
          expect([p, answer]).toEqual([p, expect.stringMatching(/^S21[0-2]$/)])
        expect(r.markerExists).toBe(false)
      } finally {
        cleanup()
      }
    }, 150_000)

    it('a detached sandbox is listed alive, survives a hostile activity.json, and is reaped at its TTL with no krunbox process left', async () => {
      const { work, result: r, cleanup } = await asNobody('rootless-host-child.ts')
      try {
        expect(r.uid).toBe(NOBODY)
        expect(r.cgroupDirs).toEqual([])
        expect(r.listed).toEqual([{ id: r.id, status: 'idle' }])
        // The creating process has exited; only the sandbox and its reaper are left.
        const entry = path.join(work, 'state', r.id)
        const deadline = Date.now() + 20_000
        while (fs.existsSync(entry) && Date.now() < deadline) await new Promise((res) => setTimeout(res, 50))
        expect(fs.existsSync(entry)).toBe(false)
        expect(JSON.parse(fs.readFileSync(path.join(work, 'state', '.history', `${r.id}.json`), 'utf8')).reason).toBe(
          'ttl_expired',
        )
        expect(await processesLeft(r.id)).toEqual([])
      } finally {
        cleanup()
      }
    }, 90_000)
  },
)
