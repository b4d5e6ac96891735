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
  const onPath = executable(path.join(dir, 'bin', 'bwrap'))
  const env = { PATH: `/nonexistent:${path.dirname(onPath)}` }

  it('is the bwrap on PATH, KRUNBOX_BWRAP over it, and null without either', () => {
    expect(bubblewrapPath(env)).toBe(onPath)
    const other = executable(path.join(dir, 'other', 'bwrap'))
    expect(bubblewrapPath({ ...env, KRUNBOX_BWRAP: other })).toBe(other)
    expect(bubblewrapPath({ PATH: '/nonexistent' })).toBeNull()
  })

  it('looks again when the bwrap it found is gone, no longer executable, or PATH changed', () => {
    const first = executable(path.join(dir, 'a', 'bwrap'))
    const second = executable(path.join(dir, 'b', 'bwrap'))
    const both = { PATH: `${path.dirname(first)}:${path.dirname(second)}` }
    expect(bubblewrapPath(both)).toBe(first)
    fs.rmSync(first)
    expect(bubblewrapPath(both)).toBe(second)
    expect(bubblewrapPath(env)).toBe(onPath)
    expect(bubblewrapPath(both)).toBe(second)
    fs.chmodSync(second, 0o644)
    expect(bubblewrapPath(both)).toBeNull()
  })

  it('rejects a KRUNBOX_BWRAP that is relative, missing or not executable with S302 naming it', () => {
    const plain = path.join(dir, 'plain')
    fs.writeFileSync(plain, '', { mode: 0o644 })
    for (const bad of ['bwrap', path.join(dir, 'missing'), plain, dir]) {
      let err: unknown
      try {
        bubblewrapPath({ ...env, KRUNBOX_BWRAP: bad })
      } catch (e) {
        err = e
      }
      expect(isSandboxError(err, 'S302')).toBe(true)
      expect((err as Error).message).toContain(JSON.stringify(bad))
    }
  })
})
