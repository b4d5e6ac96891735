import { execFileSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { beforeAll, describe, expect, it } from 'vitest'

import { isSandboxError } from '../../lib/errors.js'
import { probe } from '../../lib/native.js'
import { bubblewrapPath } from '../../lib/paths.js'
import { libkrunDoublePath } from '../fixtures/libkrun-double/index.js'
import { ensureNativeBuilt } from './helpers.js'

// What the test can see on its own, to check the probe against.
const cpuHasVmxOrSvm = /^flags\s*:.*\b(vmx|svm)\b/m.test(readFileSync('/proc/cpuinfo', 'utf8'))
const kvmPvmLoaded = existsSync('/sys/module/kvm_pvm')

function cgroupModeFromMountinfo(): string {
  const types = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((line) => line.split(' - ')[1]?.split(' ')[0])
  const v1 = types.includes('cgroup')
  const v2 = types.includes('cgroup2')
  return v1 && v2 ? 'hybrid' : v1 ? 'v1' : v2 ? 'v2' : 'none'
}

beforeAll(() => ensureNativeBuilt())

describe('probe()', () => {
  it('reports KVM as this host has it', () => {
    const p = probe()
    expect(p.arch).toBe(execFileSync('uname', ['-m'], { encoding: 'utf8' }).trim())
    expect(p.kvm.devicePresent).toBe(existsSync('/dev/kvm'))
    expect(p.kvm.hardwareVirt).toBe(cpuHasVmxOrSvm)
    expect(p.kvm.usable).toBe(p.kvm.accessible && p.kvm.hardwareVirt && !p.kvm.softwareBackend)
  })

  it.runIf(kvmPvmLoaded)('names the software backend kvm_pvm and reports krun unavailable', () => {
    const p = probe()
    expect(p.kvm.backend).toBe('kvm_pvm')
    expect(p.kvm.softwareBackend).toBe(true)
    expect(p.kvm.modules).toContain('kvm_pvm')
    expect(p.kvm.usable).toBe(false)
    expect(p.krunUnavailableReason).toMatch(/^software KVM backend kvm_pvm/)
    if (!cpuHasVmxOrSvm) {
      expect(p.kvm.hardwareVirt).toBe(false)
      expect(p.krunUnavailableReason).toContain('no vmx/svm')
    }
  })

  it('reports libkrun missing with the loader message', () => {
    const p = probe({ libkrunPath: '/nonexistent/libkrun.so.1' })
    expect(p.libkrun).toMatchObject({ loadable: false, path: '/nonexistent/libkrun.so.1', resolvedPath: null, version: null })
    expect(p.libkrun.error).toContain('/nonexistent/libkrun.so.1')
    expect(p.krunUnavailableReason).not.toBeNull()
  })

  it('loads a library that exports the libkrun entry points (the test double) and rejects one that does not', () => {
    const good = probe({ libkrunPath: libkrunDoublePath })
    expect(good.libkrun).toMatchObject({ loadable: true, path: libkrunDoublePath, resolvedPath: libkrunDoublePath, version: null, error: null })

    const notKrun = probe({ libkrunPath: 'libc.so.6' })
    expect(notKrun.libkrun.loadable).toBe(false)
    expect(notKrun.libkrun.error).toBe('libc.so.6 does not export krun_set_log_level')
  })

  it('finds bubblewrap on PATH, or reports the one it is given, with its version', () => {
    const onPath = execFileSync('sh', ['-c', 'command -v bwrap'], { encoding: 'utf8' }).trim()
    const versionOf = (file: string) => execFileSync(file, ['--version'], { encoding: 'utf8' }).trim().split(' ').pop()
    expect(probe().bubblewrap).toEqual({ path: onPath, version: versionOf(onPath) })
    const built = bubblewrapPath()!
    expect(probe({ bubblewrapPath: built }).bubblewrap).toEqual({ path: built, version: versionOf(built) })
    expect(probe({ bubblewrapPath: '/nonexistent/bwrap' }).bubblewrap).toEqual({ path: '/nonexistent/bwrap', version: null })
    expect(() => probe({ bubblewrapPath: '' })).toThrow(/options\.bubblewrapPath must not be empty/)
  })

  it('reports the cgroup layout from the mount table', () => {
    const p = probe()
    expect(p.cgroup.mode).toBe(cgroupModeFromMountinfo())
    for (const name of ['memory', 'pids', 'cpu', 'freezer'] as const) {
      const c = p.cgroup.controllers[name]
      if (c === null) continue
      expect(existsSync(c.path)).toBe(true)
      if (p.cgroup.mode !== 'v2') expect(c.version === 1 || name !== 'freezer').toBe(true)
    }
    const all = Object.values(p.cgroup.controllers)
    expect(p.cgroup.writable).toBe(all.every((c) => c !== null && c.writable))
  })

  it('reports whether unprivileged user namespaces are allowed', () => {
    const sysctl = (path: string): string | null => (existsSync(path) ? readFileSync(path, 'utf8').trim() : null)
    const allowed =
      sysctl('/proc/sys/user/max_user_namespaces') !== '0' &&
      sysctl('/proc/sys/kernel/unprivileged_userns_clone') !== '0' &&
      sysctl('/proc/sys/kernel/apparmor_restrict_unprivileged_userns') !== '1'
    const p = probe()
    expect(p.userns.unprivilegedAllowed).toBe(allowed)
    expect(p.userns.blockedBy === null).toBe(allowed)
  })

  it('rejects bad options with S001 naming the value', () => {
    expect(() => probe({ libkrunPath: 42 as unknown as string })).toThrow(/options\.libkrunPath must be a string, got number 42/)
    try {
      probe('x' as never)
    } catch (err) {
      expect(isSandboxError(err, 'S001')).toBe(true)
    }
    expect.assertions(2)
  })
})
