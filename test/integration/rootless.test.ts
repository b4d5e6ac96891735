/** The namespace driver as an unprivileged host user: no cgroups (reported), same sandbox. */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { ImageStore } from '../../lib/images/index.js'

const NOBODY = 65534
const asRoot = process.getuid?.() === 0

describe.skipIf(!asRoot)('as an unprivileged user (started from root with setpriv; the suite itself is unprivileged otherwise)', () => {
  it('creates a sandbox, runs a command without capabilities, warns that limits are not enforced, stops', async () => {
    const base = await new ImageStore().resolve('base')
    const work = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-rootless-'))
    try {
      fs.chmodSync(work, 0o755)
      const image = path.join(work, 'image')
      execFileSync('cp', ['-a', base.rootfs, image])
      execFileSync('chown', ['-R', `${NOBODY}:${NOBODY}`, work])
      const out = execFileSync(
        'setpriv',
        ['--reuid', String(NOBODY), '--regid', String(NOBODY), '--clear-groups', process.execPath, '--import', 'tsx', path.resolve('test/fixtures/rootless-child.ts'), work, image],
        { env: { ...process.env, HOME: work }, timeout: 60_000, encoding: 'utf8' },
      )
      const r = JSON.parse(out.trim().split('\n').pop()!)
      expect(r.uid).toBe(NOBODY)
      expect(r.exitCode).toBe(0)
      expect(r.stdout).toMatch(/^0\nprivate\nCapEff:\s+0+\n$/)
      expect(r.status).toBe('destroyed')
      expect(r.warnings.join('\n')).toMatch(/not enforced by cgroups/)
      expect(fs.readdirSync(path.join(work, 'state')).filter((n) => !n.startsWith('.'))).toEqual([])
    } finally {
      fs.rmSync(work, { recursive: true, force: true })
    }
  }, 90_000)
})

describe.skipIf(!asRoot)('the escape attempts, made by an unprivileged host user', () => {
  it('every attempt fails, nothing reaches the host, and the sandbox is root only inside', async () => {
    const base = await new ImageStore().resolve('base')
    const work = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-rootless-escape-'))
    try {
      fs.chmodSync(work, 0o755)
      const image = path.join(work, 'image')
      execFileSync('cp', ['-a', base.rootfs, image])
      execFileSync('chown', ['-R', `${NOBODY}:${NOBODY}`, work])
      const marker = path.join(work, 'marker')
      const out = execFileSync(
        'setpriv',
        ['--reuid', String(NOBODY), '--regid', String(NOBODY), '--clear-groups', process.execPath, '--import', 'tsx', path.resolve('test/fixtures/escape-child.ts'), work, image, marker],
        { env: { ...process.env, HOME: work }, timeout: 120_000, encoding: 'utf8' },
      )
      const r = JSON.parse(out.trim().split('\n').pop()!)
      expect(r.uid).toBe(NOBODY)
      expect(r.insideUid).toBe('0')
      for (const [name, result] of Object.entries(r.attempts as Record<string, { held: boolean; stdout: string }>)) {
        expect([name, result.held, result.stdout]).toEqual([name, true, result.stdout])
      }
      for (const [p, answer] of Object.entries(r.fsAnswers as Record<string, string>)) expect([p, answer]).toEqual([p, expect.stringMatching(/^S21[0-2]$/)])
      expect(fs.existsSync(marker)).toBe(false)
    } finally {
      fs.rmSync(work, { recursive: true, force: true })
    }
  }, 150_000)
})
