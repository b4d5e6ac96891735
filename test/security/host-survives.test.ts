/**
 * A native completion (a libuv pool task's, an exit
 * watch's) that fires while Node tears the environment down must not throw into C++ and abort
 * the host (`terminate called after throwing an instance of 'Napi::Error'`, exit 134).
 * (Issue 28, "the host process never dies".)
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { libkrunDoublePath, libkrunfwDoubleDir } from '../fixtures/libkrun-double/index.js'
import { asRoot, checkoutUnreachable } from '../helpers/rootless.js'

const CHILD = path.resolve('test/fixtures/host-ending-child.ts')
const KRUN_CHILD = path.resolve('test/fixtures/host-krun-timeout-child.ts')
const FAKE_VM = path.resolve('test/fixtures/krun-fake-vm.mjs')
const WORKER_CHILD = path.resolve('test/fixtures/host-worker-child.ts')
const NODE_TSX = [process.execPath, '--import', 'tsx']
const stateDirs: string[] = []
afterAll(() => {
  for (const dir of stateDirs) fs.rmSync(dir, { recursive: true, force: true })
})

/** Runs the child to its end: its exit code, the signal that ended it, and what it printed. */
function runChild(
  mode: string,
  krunEnv?: NodeJS.ProcessEnv,
): Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string; stateDir: string }> {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-host-survives-'))
  stateDirs.push(stateDir)
  return new Promise((resolve, reject) => {
    const args =
      mode === 'worker' ? [WORKER_CHILD, stateDir] : krunEnv ? [KRUN_CHILD, stateDir] : [CHILD, mode, stateDir]
    const p = spawn(NODE_TSX[0], [...NODE_TSX.slice(1), ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...krunEnv },
    })
    let stdout = ''
    let stderr = ''
    p.stdout.on('data', (d) => (stdout += d))
    p.stderr.on('data', (d) => (stderr += d))
    p.on('error', reject)
    p.on('close', (code, signal) => resolve({ code, signal, stdout, stderr, stateDir }))
  })
}

describe('host process: a sandbox that ends by itself', () => {
  for (const mode of ['idle', 'ttl', 'exit'] as const) {
    it(`host process: the script's exit after a ${mode === 'exit' ? "host write started by an 'exit' handler" : `sandbox ended by its ${mode} timeout`} never aborts it (5 runs)`, async () => {
      const runs = await Promise.all(Array.from({ length: 5 }, () => runChild(mode)))
      for (const run of runs) {
        // The end ran to its finish on the event loop, not cut short by the loop running dry.
        expect(run.stdout).toMatch(/^created [0-9a-f-]{36}\nloop ended: destroyed, 0 entries\n$/)
        expect(run.stderr).not.toContain('terminate called')
        expect({ code: run.code, signal: run.signal }).toEqual({ code: 0, signal: null })
        // Nothing of the sandbox is left behind either: its entry went with it.
        const entries = fs.readdirSync(run.stateDir).filter((n) => !n.startsWith('.'))
        expect(entries).toEqual([])
      }
    }, 120_000)
  }
})

// On a root host the double's guest runs as the sandbox's id range, which must reach the checkout.
const doubleCannotBoot = asRoot ? checkoutUnreachable : null

describe('host process: a krun create that meets its boot deadline (libkrun double)', () => {
  it.skipIf(doubleCannotBoot !== null)(
    'host process: a krun guest that never answers is S305 at bootTimeoutMs, and the script then exits 0 (3 runs)',
    async () => {
      const krunEnv = {
        KRUNBOX_KRUN_ASSUME_USABLE: '1',
        KRUNBOX_LIBKRUN_PATH: libkrunDoublePath,
        LD_LIBRARY_PATH: libkrunfwDoubleDir,
        KRUN_DOUBLE_ENTER: `exec ${process.execPath} ${FAKE_VM} silent`,
      }
      const runs = await Promise.all(Array.from({ length: 3 }, () => runChild('krun', krunEnv)))
      for (const run of runs) {
        expect(run.stderr).not.toContain('terminate called')
        expect(run.stdout).toBe('S305\n')
        expect({ code: run.code, signal: run.signal }).toEqual({ code: 0, signal: null })
        expect(fs.readdirSync(run.stateDir).filter((n) => !n.startsWith('.'))).toEqual([])
      }
    },
    120_000,
  )
})

describe('host process: a worker thread ended with native work in flight', () => {
  it('host process: 20 workers terminated with 50 fsBatch tasks each in flight never abort the host', async () => {
    const run = await runChild('worker')
    expect(run.stderr).not.toContain('terminate called')
    expect({ code: run.code, signal: run.signal }).toEqual({ code: 0, signal: null })
    // A task whose promise could no longer settle closed its fds (PromiseWorker::Discard); one
    // that resolved just before terminate() stopped the worker's JS handed them to code that never
    // ran: those stay open, as any fd a terminated worker held.
    expect(run.stdout).toMatch(/^fds left: \d+\n$/)
  }, 60_000)
})
