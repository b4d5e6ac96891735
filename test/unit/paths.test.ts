import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
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

  it('prefers the static build, and KRUNBOX_BWRAP over both', () => {
    const built = executable(path.join(root, 'bwrap', 'dist', 'bwrap'))
    expect(bubblewrapPath(env, root)).toBe(built)
    expect(bubblewrapPath({ ...env, KRUNBOX_BWRAP: onPath }, root)).toBe(onPath)
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
