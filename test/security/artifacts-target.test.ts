/**
 * `artifacts.to: '/proc/x'` made create() spin for ever (node's recursive
 * mkdir never returns there, and it is synchronous, so nothing else in the host ran). Every
 * target that is no directory (under /proc, a FIFO, a device, a file) is S001 naming the path.
 * The create runs in a child process, so the test's own deadline can end a hang.
 * (Issue 28, point 10.)
 */
import { spawn } from 'node:child_process'
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-sec-target-'))
afterAll(() => fs.rmSync(work, { recursive: true, force: true }))

/** What create({ artifacts: { to } }) answers, from a child; null when the child had to be killed (a hang). */
function createIn(to: string, deadlineMs: number): Promise<{ code: string; message: string } | null> {
  const script = `
    import { Runtime } from ${JSON.stringify(path.resolve('lib/runtime.ts'))}
    const rt = new Runtime({ stateDir: process.argv[1] })
    try {
      const sb = await rt.create({ image: 'base', driver: 'namespace', artifacts: { paths: ['/workspace'], to: process.argv[2] } })
      await sb.stop()
      console.log(JSON.stringify({ code: 'none', message: '' }))
    } catch (e) {
      console.log(JSON.stringify({ code: e.code, message: e.message }))
    }
    await rt.close()
  `
  return new Promise((resolve) => {
    const child = spawn(
      process.execPath,
      ['--import', 'tsx', '--input-type=module', '-e', script, path.join(work, 'state'), to],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    )
    let out = ''
    child.stdout.on('data', (d: Buffer) => (out += d))
    const timer = setTimeout(() => child.kill('SIGKILL'), deadlineMs)
    child.on('exit', () => {
      clearTimeout(timer)
      const line = out.trim().split('\n').pop() ?? ''
      resolve(line.startsWith('{') ? JSON.parse(line) : null)
    })
  })
}

describe('artifacts: targets that are no directory', () => {
  const fifo = path.join(work, 'fifo')
  const file = path.join(work, 'file')
  execFileSync('mkfifo', [fifo])
  fs.writeFileSync(file, 'x')
  const targets = ['/proc/x', '/proc/self/nope/deeper', fifo, `${fifo}/below`, '/dev/zero', file]
  for (const to of targets) {
    it(`artifacts: to ${to} is refused with S001 naming it, never a hang`, async () => {
      const got = await createIn(to, 30_000)
      expect(got).not.toBeNull()
      expect(got!.code).toBe('S001')
      expect(got!.message).toContain(to)
    }, 60_000)
  }
})
