/**
 * Attack tests: the krun driver's readiness signal (agent.listening in the control
 * share) and the libkrun double's device stand-ins, against a hostile guest and a root workload
 * holding every capability. Under the libkrun TEST DOUBLE (no VM boots here).
 * (Issue 30.)
 */
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import { hostProbe } from '../../lib/probe.js'
import { Runtime } from '../../lib/runtime.js'
import { libkrunDoublePath, libkrunfwDoubleDir } from '../fixtures/libkrun-double/index.js'
import { asRoot, checkoutUnreachable } from '../helpers/rootless.js'
import { SHARED_CACHE } from '../images/helpers.js'
import { ensureNativeBuilt, makeTempDir } from '../native/helpers.js'
import { restoreEnv } from '../helpers/env.js'

const fixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'fixtures')
const doubleCannotBoot = asRoot ? checkoutUnreachable : null
const tmp = makeTempDir('krunbox-krun-ready-attack-')
const savedEnv = { ...process.env }
let rt: Runtime

function useDouble(): void {
  process.env.KRUNBOX_KRUN_ASSUME_USABLE = '1'
  process.env.KRUNBOX_LIBKRUN_PATH = libkrunDoublePath
  process.env.LD_LIBRARY_PATH = libkrunfwDoubleDir
  delete process.env.KRUN_DOUBLE_ENTER
}

beforeAll(() => {
  ensureNativeBuilt()
  fs.chmodSync(tmp.dir, 0o755)
  useDouble()
  hostProbe({ refresh: true })
  rt = new Runtime({ stateDir: path.join(tmp.dir, 'state'), cacheDir: SHARED_CACHE })
})
afterEach(() => {
  restoreEnv(savedEnv)
  useDouble()
})
afterAll(async () => {
  await rt?.close()
  restoreEnv(savedEnv)
  hostProbe({ refresh: true })
  tmp.cleanup()
})

describe.skipIf(doubleCannotBoot !== null)(
  `krun readiness attacks (double)${doubleCannotBoot ? ` (skipped: ${doubleCannotBoot})` : ''}`,
  () => {
    it('krun readiness: a hostile guest whose agent.listening is a directory is held (the create ends in a SandboxError, not a raw host error)', async () => {
      process.env.KRUN_DOUBLE_ENTER = `exec node ${path.join(fixtures, 'krun-fake-vm.mjs')} refuse-dir`
      const sb = await rt.create({ driver: 'krun', wait: false, bootTimeoutMs: 5000 })
      const err = await sb.ready().then(
        () => null,
        (e: unknown) => e,
      )
      expect(err).toBeInstanceOf(SandboxError)
      // The boot goes on to the handshake, which this fake refuses: S305, not the host tripping over the guest's directory.
      expect((err as SandboxError).code).toBe('S305')
      expect((err as SandboxError).message).toContain('did not complete the handshake')
      expect(sb.status).toBe('failed')
    })

    it('krun readiness: a hostile guest whose agent.listening links to a host file is held (the target is neither read nor removed)', async () => {
      const victim = path.join(tmp.dir, 'victim.txt')
      fs.writeFileSync(victim, 'host data\n')
      process.env.KRUN_DOUBLE_ENTER = `exec node ${path.join(fixtures, 'krun-fake-vm.mjs')} refuse-link ${victim}`
      const sb = await rt.create({ driver: 'krun', wait: false, bootTimeoutMs: 5000 })
      const err = await sb.ready().then(
        () => null,
        (e: unknown) => e,
      )
      expect(err).toBeInstanceOf(SandboxError)
      expect(fs.readFileSync(victim, 'utf8')).toBe('host data\n')
    })

    it("krun guest: a root workload with every capability a sandbox can hold cannot reach the control share or the double's device stand-ins", async () => {
      const sb = await rt.create({
        driver: 'krun',
        capabilities: ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'SETUID', 'SETGID'],
      })
      try {
        const r = await sb.exec('sh', [
          '-c',
          [
            'ls -a / /krunbox 2>&1',
            'find / -xdev \\( -name agent.listening -o -name agent.sock -o -name .krun-double -o -name config.json \\) 2>/dev/null',
            'mkdir -p /mnt/x && (mount -t virtiofs krunbox-ctl /mnt/x 2>&1 || true)',
            'grep -c krun-double /proc/self/mountinfo || true',
          ].join('; '),
        ])
        expect(r.stdout).not.toMatch(/\.krun-double|agent\.listening|agent\.sock|config\.json/)
        expect(r.stdout.trim().split('\n').at(-1)).toBe('0')
        // Nothing the workload did landed in the control share.
        expect(
          fs
            .readdirSync(path.join(tmp.dir, 'state', sb.id, 'ctl'))
            .filter((n) => !['activity.json', '.activity.json.tmp', 'agent.sock'].includes(n)),
        ).toEqual([])
      } finally {
        await sb.stop()
      }
    })
  },
)
