/**
 * `krunbox doctor --boot` end to end under the libkrun TEST DOUBLE (the CLI as a user
 * runs it, booting "VMs" with the agent in VM mode). The double is no VM: what it cannot stand in
 * for is reported as FAIL, and this test pins which (docs/krun.md): the guest's memory (the double's
 * guest sees the host's). Its guest has no pids hierarchy of its own either, and the agent's
 * RLIMIT_NPROC fallback (set above its own threads) holds the burst there. On a KVM host every
 * line must PASS.
 * (Issue 30.)
 */
import { spawn } from 'node:child_process'
import path from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { libkrunDoublePath, libkrunfwDoubleDir } from '../fixtures/libkrun-double/index.js'
import { asRoot, checkoutUnreachable } from '../helpers/rootless.js'
import { ensureNativeBuilt, makeTempDir, repoRoot } from '../native/helpers.js'

const doubleCannotBoot = asRoot ? checkoutUnreachable : null
const tmp = makeTempDir('krunbox-doctor-boot-')
afterAll(() => tmp.cleanup())

function doctorBoot(
  extraEnv: Record<string, string>,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const env = {
    ...process.env,
    KRUNBOX_KRUN_ASSUME_USABLE: '1',
    KRUNBOX_LIBKRUN_PATH: libkrunDoublePath,
    LD_LIBRARY_PATH: libkrunfwDoubleDir,
    XDG_STATE_HOME: path.join(tmp.dir, 'state'),
    ...extraEnv,
  }
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', path.join(repoRoot, 'lib', 'cli', 'main.ts'), 'doctor', '--boot'],
    { cwd: repoRoot, env },
  )
  let stdout = ''
  let stderr = ''
  child.stdout.on('data', (d) => (stdout += d))
  child.stderr.on('data', (d) => (stderr += d))
  return new Promise((resolve) => child.once('close', (code) => resolve({ code, stdout, stderr })))
}

const checkLines = (stdout: string) => stdout.split('\n').filter((l) => /^(PASS|FAIL) /.test(l))

describe.skipIf(doubleCannotBoot !== null)(
  `krunbox doctor --boot (libkrun double)${doubleCannotBoot ? ` (skipped: ${doubleCannotBoot})` : ''}`,
  () => {
    it('runs every check end to end and prints PASS/FAIL lines; only what the double cannot stand in for fails', async () => {
      ensureNativeBuilt()
      const r = await doctorBoot({})
      const lines = checkLines(r.stdout)
      expect(lines.map((l) => l.replace(/:.*/, ''))).toEqual([
        'PASS  create→ready',
        'PASS  PID 1 is the agent',
        'FAIL  vCPUs and memory',
        'PASS  env with spaces, quotes and non-ASCII',
        'PASS  3 MiB of exec output',
        'PASS  4 MiB file, host to guest',
        'PASS  4 MiB file, guest to host',
        'PASS  stop leaves nothing',
        'PASS  pidsMax 8 holds a burst and survives kill -9 -1',
        'PASS  stop leaves nothing',
      ])
      expect(lines[2]).toMatch(/MiB, not about 512/)
      expect(r.code).toBe(1)
    }, 120_000)

    it('a VM that cannot boot is one FAIL line with the boot error, and exit 1', async () => {
      ensureNativeBuilt()
      const r = await doctorBoot({ KRUN_DOUBLE_FAIL: 'krun_start_enter:-6' })
      expect(checkLines(r.stdout)).toEqual([expect.stringMatching(/^FAIL {2}create→ready: S310: .*krun_start_enter/)])
      expect(r.code).toBe(1)
    }, 60_000)
  },
)
