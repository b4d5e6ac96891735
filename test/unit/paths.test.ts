import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, describe, expect, it, vi } from 'vitest'
import { isSandboxError } from '../../lib/errors.js'
import { bubblewrapPath } from '../../lib/paths.js'

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-paths-'))
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }))

function executable(file: string): string {
  fs.mkdirSync(path.dirname(file), { recursive: true })
  fs.writeFileSync(file, '#!/bin/sh\n', { mode: 0o755 })
  return file
}

describe('bubblewrapPath()', () => {
  const root = path.join(dir, 'pkg')
  const onPath = executable(path.join(dir, 'bin', 'bwrap'))
  const env = { PATH: `/nonexistent:${path.dirname(onPath)}` }

  it('falls back to bwrap on PATH while the static build is absent, and is null without either', () => {
    expect(bubblewrapPath(env, root)).toBe(onPath)
    expect(bubblewrapPath({ PATH: '/nonexistent' }, root)).toBeNull()
  })

  const dist = path.join(root, 'bwrap', 'dist')
  const installed = executable(path.join(dir, 'usr', 'bin', 'bwrap'))
  // the record bwrap/build.sh writes, made the way it makes it
  const recordInstalled = () =>
    fs.writeFileSync(path.join(dist, 'system-bwrap'), `${installed}\n${execFileSync('stat', ['-L', '-c', '%s:%Y', installed], { encoding: 'utf8' })}`)

  it('prefers the static build while the installed bwrap is the one it was built for, and KRUNBOX_BWRAP over both', () => {
    const built = executable(path.join(dist, 'bwrap'))
    recordInstalled()
    expect(bubblewrapPath(env, root)).toBe(built)
    expect(bubblewrapPath({ ...env, KRUNBOX_BWRAP: onPath }, root)).toBe(onPath)
  })

  it('goes back to the bwrap on PATH, warning once, when the installed bwrap changed or the record is missing', () => {
    const warn = vi.spyOn(process, 'emitWarning').mockImplementation(() => {})
    try {
      fs.appendFileSync(installed, 'updated\n')
      expect(bubblewrapPath(env, root)).toBe(onPath)
      fs.rmSync(path.join(dist, 'system-bwrap'))
      expect(bubblewrapPath(env, root)).toBe(onPath)
      expect(warn).toHaveBeenCalledTimes(1)
      expect(String(warn.mock.calls[0][0])).toContain(path.join(dist, 'bwrap'))
      recordInstalled()
      expect(bubblewrapPath(env, root)).toBe(path.join(dist, 'bwrap'))
    } finally {
      warn.mockRestore()
    }
  })

  it('rejects a KRUNBOX_BWRAP that is relative, missing or not executable with S302 naming it', () => {
    const plain = path.join(dir, 'plain')
    fs.writeFileSync(plain, '', { mode: 0o644 })
    for (const bad of ['bwrap', path.join(dir, 'missing'), plain, dir]) {
      let err: unknown
      try {
        bubblewrapPath({ ...env, KRUNBOX_BWRAP: bad }, root)
      } catch (e) {
        err = e
      }
      expect(isSandboxError(err, 'S302')).toBe(true)
      expect((err as Error).message).toContain(JSON.stringify(bad))
    }
  })
})
