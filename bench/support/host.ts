/** Host-side baselines and set-up: a throwaway runtime, the base image, timed child_process runs. */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Runtime, type RuntimeConfig } from '../../lib/runtime.js'

/** A runtime whose state directory is a fresh temporary one, removed by dispose(). */
export function benchRuntime(config: RuntimeConfig = {}): { rt: Runtime; dispose: () => Promise<void> } {
  const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-bench-'))
  const rt = new Runtime({ ...config, stateDir })
  return {
    rt,
    dispose: async () => {
      await rt.close()
      // Sandboxes' reapers may still be removing what a host that was gone left (they leave a
      // living host up to 10 s to retire its sandboxes itself).
      fs.rmSync(stateDir, { recursive: true, force: true, maxRetries: 50, retryDelay: 200 })
    },
  }
}

/** The root filesystem of the base image (built on first use, so the set-up must have run). */
export async function baseRootfs(rt: Runtime): Promise<string> {
  return (await rt.images.resolve('base')).rootfs
}

/** bubblewrap with the sandbox's namespaces, starting `true` in the base image: the floor a create cannot go below. */
export function bwrapTrueArgs(rootfs: string): string[] {
  return [
    '--unshare-user',
    '--uid',
    '0',
    '--gid',
    '0',
    '--unshare-pid',
    '--unshare-net',
    '--unshare-ipc',
    '--unshare-uts',
    '--ro-bind',
    rootfs,
    '/',
    '--proc',
    '/proc',
    '--dev',
    '/dev',
    'true',
  ]
}

/** Milliseconds from spawn to exit of a host process (stdio ignored). */
export function timeSpawn(file: string, args: string[]): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now()
    const child = spawn(file, args, { stdio: 'ignore' })
    child.once('error', reject)
    child.once('exit', (code, signal) => {
      if (code !== 0) reject(new Error(`${file} exited with ${code ?? signal}`))
      else resolve(performance.now() - t0)
    })
  })
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}

/** The machine's CPU time so far, busy and all, in jiffies (the first line of /proc/stat). */
function cpuTimes(): { busy: number; total: number } {
  const f = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number)
  const idle = f[3] + f[4] // idle, iowait
  const total = f.reduce((a, b) => a + b, 0)
  return { busy: total - idle, total }
}

/**
 * Waits until the machine's cores are at most `busyBelow` busy over one second (the kernel
 * tears down a previous run's sandboxes in the background for a while), at most `maxWaitMs`.
 * Returns how long it waited and the last second's busy share.
 */
export async function quietMachine(busyBelow = 0.05, maxWaitMs = 120_000): Promise<{ waitedMs: number; busy: number }> {
  const t0 = performance.now()
  for (;;) {
    const a = cpuTimes()
    await sleep(1000)
    const b = cpuTimes()
    const busy = (b.busy - a.busy) / Math.max(1, b.total - a.total)
    const waitedMs = performance.now() - t0
    if (busy < busyBelow || waitedMs >= maxWaitMs) return { waitedMs, busy }
  }
}
