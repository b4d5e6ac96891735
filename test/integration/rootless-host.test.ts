/**
 * Issues 20/21 as an unprivileged host user (no cgroups): a record's pid is still recognised (by
 * start time and executable), a hostile activity.json does not stall list(), and a detached
 * sandbox whose host has exited is cleaned up by its reaper when its TTL ends.
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

describe.skipIf(!asRoot)('host-side safety as an unprivileged user', () => {
  it('a detached sandbox is listed alive, survives a hostile activity.json, and is reaped at its TTL with no krunbox process left', async () => {
    const base = await new ImageStore().resolve('base')
    const work = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-rootless-host-'))
    try {
      fs.chmodSync(work, 0o755)
      const image = path.join(work, 'image')
      execFileSync('cp', ['-a', base.rootfs, image])
      execFileSync('chown', ['-R', `${NOBODY}:${NOBODY}`, work])
      const out = execFileSync(
        'setpriv',
        ['--reuid', String(NOBODY), '--regid', String(NOBODY), '--clear-groups', process.execPath, '--import', 'tsx', path.resolve('test/fixtures/rootless-host-child.ts'), work, image],
        { env: { ...process.env, HOME: work }, timeout: 60_000, encoding: 'utf8' },
      )
      const r = JSON.parse(out.trim().split('\n').pop()!)
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
      fs.rmSync(work, { recursive: true, force: true })
    }
  }, 90_000)
})
