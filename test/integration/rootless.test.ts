/**
 * The namespace driver as an unprivileged host user (a child started from root with setpriv):
 * no cgroups (reported), the same sandbox, the same escape attempts held, and the host-side
 * safety of issues 20/21 (a record's pid recognised by start time and executable, a hostile
 * activity.json, a detached sandbox reaped at its TTL with no krunbox process left).
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { ImageStore } from '../../lib/images/index.js'
import { processesMentioning } from '../helpers/runtime.js'

const NOBODY = 65534
const asRoot = process.getuid?.() === 0

/**
 * Runs test/fixtures/<fixture> as nobody with a work directory and a copy of the base image
 * that nobody owns (argv: work, image, ...extra); returns its last stdout line as JSON.
 */
async function asNobody(fixture: string, extra: (work: string) => string[] = () => []): Promise<{ work: string; result: any; cleanup(): void }> {
  const base = await new ImageStore().resolve('base')
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-rootless-'))
  const cleanup = () => fs.rmSync(work, { recursive: true, force: true })
  try {
    fs.chmodSync(work, 0o755)
    const image = path.join(work, 'image')
    execFileSync('cp', ['-a', base.rootfs, image])
    execFileSync('chown', ['-R', `${NOBODY}:${NOBODY}`, work])
    const out = execFileSync(
      'setpriv',
      ['--reuid', String(NOBODY), '--regid', String(NOBODY), '--clear-groups', process.execPath, '--import', 'tsx', path.resolve('test/fixtures', fixture), work, image, ...extra(work)],
      { env: { ...process.env, HOME: work }, timeout: 120_000, encoding: 'utf8' },
    )
    return { work, result: JSON.parse(out.trim().split('\n').pop()!), cleanup }
  } catch (err) {
    cleanup()
    throw err
  }
}

describe.skipIf(!asRoot)('as an unprivileged user (started from root with setpriv; the suite itself is unprivileged otherwise)', () => {
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

  it('holds every escape attempt: nothing reaches the host, and the sandbox is root only inside', async () => {
    const { result: r, cleanup } = await asNobody('escape-child.ts', (work) => [path.join(work, 'marker')])
    try {
      expect(r.uid).toBe(NOBODY)
      expect(r.insideUid).toBe('0')
      for (const [name, result] of Object.entries(r.attempts as Record<string, { held: boolean; stdout: string }>)) {
        expect([name, result.held, result.stdout]).toEqual([name, true, result.stdout])
      }
      for (const [p, answer] of Object.entries(r.fsAnswers as Record<string, string>)) expect([p, answer]).toEqual([p, expect.stringMatching(/^S21[0-2]$/)])
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
      expect(JSON.parse(fs.readFileSync(path.join(work, 'state', '.history', `${r.id}.json`), 'utf8')).reason).toBe('ttl_expired')
      expect(processesMentioning(r.id)).toEqual([])
    } finally {
      cleanup()
    }
  }, 90_000)
})
