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
    '--unshare-user', '--uid', '0', '--gid', '0',
    '--unshare-pid', '--unshare-net', '--unshare-ipc', '--unshare-uts',
    '--ro-bind', rootfs, '/',
    '--proc', '/proc',
    '--dev', '/dev',
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
