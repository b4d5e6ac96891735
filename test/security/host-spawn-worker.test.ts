/**
 * A native spawnAsync whose worker thread is terminated before the launch
 * settles. Before, its completion could settle nothing: the child (here `sleep 60`) kept running
 * with nobody to watch it, its pipe fds stayed open in the host, and the completion could throw
 * into the torn-down environment. Now such a launch is discarded (native/src/addon/promise_worker.h):
 * the child is killed and reaped and its fds closed. Checked from a separate host process: it
 * must exit 0 and leave no process named by the test's marker.
 * (Issue 28 ("never die").)
 */
import { spawn } from 'node:child_process'
import crypto from 'node:crypto'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { withMarker } from '../fixtures/spawn-worker-child.js'

const CHILD = path.resolve('test/fixtures/spawn-worker-child.ts')

describe('host process: a worker thread ended with native spawns in flight', () => {
  it('host process: 10 workers terminated with 16 spawnAsync launches each in flight survive, and no spawned child is left running nor its pipes open', async () => {
    const marker = `kb-spawn-marker-${crypto.randomBytes(6).toString('hex')}`
    const run = await new Promise<{
      code: number | null
      signal: NodeJS.Signals | null
      stdout: string
      stderr: string
    }>((resolve, reject) => {
      const p = spawn(process.execPath, ['--import', 'tsx', CHILD, marker, '10'], { stdio: ['ignore', 'pipe', 'pipe'] })
      let stdout = ''
      let stderr = ''
      p.stdout.on('data', (d) => (stdout += d))
      p.stderr.on('data', (d) => (stderr += d))
      p.on('error', reject)
      p.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }))
    })
    const left = withMarker(marker)
    for (const pid of left) process.kill(pid, 'SIGKILL')
    expect(run.stderr).not.toContain('terminate called')
    expect({ code: run.code, signal: run.signal }).toEqual({ code: 0, signal: null })
    expect(run.stdout).toBe('left: 0 pipes: 0\n')
    expect(left).toEqual([])
  }, 60_000)
})
