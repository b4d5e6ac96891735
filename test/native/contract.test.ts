import { createRequire } from 'node:module'
import { beforeAll, describe, expect, it } from 'vitest'

import { isSandboxError } from '../../lib/errors.js'
import { krunShimBootErrorToSandboxError, parseKrunShimBootError } from '../../lib/drivers/krun-shim-codec.js'
import { loadNative, nativeAddonPath, signalNumber } from '../../lib/native.js'
import { ensureNativeBuilt, repoRoot } from './helpers.js'

beforeAll(() => ensureNativeBuilt())

describe('native contract', () => {
  it('the addon exports every function lib/native.ts calls', () => {
    const raw = createRequire(import.meta.url)('node-gyp-build')(repoRoot) as Record<string, unknown>
    for (const name of ['probe', 'spawn', 'pipe', 'watchExit', 'kill', 'killGroup']) {
      expect(typeof raw[name], name).toBe('function')
    }
    expect(nativeAddonPath()).toMatch(/krunbox\.node$/)
    const api = loadNative()
    for (const [name, fn] of Object.entries(api)) expect(typeof fn, name).toBe('function')
  })

  it('converts signal names and rejects unknown ones with S001', () => {
    expect(signalNumber('SIGKILL')).toBe(9)
    expect(signalNumber(15)).toBe(15)
    for (const bad of ['KILL', 'SIGFOO', 65, -1, 1.5]) {
      try {
        signalNumber(bad as never)
        expect.unreachable()
      } catch (err) {
        expect(isSandboxError(err, 'S001')).toBe(true)
      }
    }
  })

  it('parses boot-error lines and ignores anything malformed', () => {
    const line = '{"stage":"set_root","call":"krun_set_root","errno":2,"message":"no such dir"}\n'
    expect(parseKrunShimBootError(line)).toEqual({ stage: 'set_root', call: 'krun_set_root', errno: 2, message: 'no such dir' })
    expect(parseKrunShimBootError('')).toBeNull()
    expect(parseKrunShimBootError('krun-shim: garbage')).toBeNull()
    expect(parseKrunShimBootError('{"stage":"x","errno":"2","message":"m","call":null}')).toBeNull()
    const error = krunShimBootErrorToSandboxError(parseKrunShimBootError(line)!)
    expect(error.code).toBe('S310')
    expect(error.details).toEqual({ stage: 'set_root', call: 'krun_set_root', errno: 2, errnoName: 'ENOENT' })
    expect(error.message).toBe('S310: krun-shim failed at set_root: no such dir')
  })
})
