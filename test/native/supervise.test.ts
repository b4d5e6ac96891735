/**
 * spawnSupervised (lib/drivers/supervise.ts) with a stand-in for bwrap: a process that leaves a
 * child in its group holding its stdout, as bwrap's child does while it waits for its parent.
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { spawnSupervised } from '../../lib/drivers/supervise.js'
import { ensureNativeBuilt, makeTempDir, processState, until } from './helpers.js'

const tmp = makeTempDir('krunbox-supervise-')
beforeAll(() => ensureNativeBuilt())
afterAll(() => tmp.cleanup())

it('kill() ends the process and what it left in its group, and the wait for READY ends with the process, not with its stdout', async () => {
  const pidFile = path.join(tmp.dir, 'left.pid')
  const child = await spawnSupervised({
    file: '/bin/sh',
    args: ['-c', `sleep 600 & echo $! > ${pidFile}; exec sleep 600`],
    stderrFile: path.join(tmp.dir, 'stderr.log'),
    cgroupJoinFiles: [],
    dieWithParent: true,
  })
  expect(await until(() => fs.existsSync(pidFile) && fs.readFileSync(pidFile, 'utf8').endsWith('\n'), 5000)).toBe(true)
  const left = Number(fs.readFileSync(pidFile, 'utf8'))
  // The READY wait runs far longer than this test may: only the process's end can settle it.
  const waiting = child.waitForLine('READY', 600_000).then(() => null, (e: Error) => e)
  child.kill('SIGKILL')
  expect((await waiting)?.message).toMatch(/exited before it was ready/)
  expect((await child.exited).signal).toBe('SIGKILL')
  expect(await until(() => [null, 'Z'].includes(processState(left)), 5000)).toBe(true)
}, 30_000)
