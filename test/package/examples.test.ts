/**
 * Each example in examples/ runs as a user would run it (node, importing 'krunbox' by
 * its package name, i.e. the built dist/) and prints what it promises.
 * (Issue 16.)
 */
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { afterAll, describe, expect, it } from 'vitest'

const run = promisify(execFile)
const repoRoot = path.resolve(import.meta.dirname, '../..')
const home = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-examples-'))
const env = { ...process.env, XDG_STATE_HOME: path.join(home, 'state'), XDG_CONFIG_HOME: path.join(home, 'config') }

function example(name: string, extraEnv: Record<string, string> = {}) {
  return run('node', [path.join(repoRoot, 'examples', name)], {
    cwd: repoRoot,
    env: { ...env, ...extraEnv },
    timeout: 240_000,
  })
}

afterAll(() => {
  // Every sandbox an example made is gone: its state directory holds no live entry.
  const sandboxes = path.join(home, 'state', 'krunbox', 'sandboxes')
  const left = fs.existsSync(sandboxes) ? fs.readdirSync(sandboxes).filter((n) => /^[0-9a-f-]{36}$/.test(n)) : []
  fs.rmSync(home, { recursive: true, force: true })
  expect(left).toEqual([])
})

describe('examples/', () => {
  it('parallel-tests: 20 isolated jobs, streamed logs, a summary; a failing job fails the run', async () => {
    const { stdout } = await example('parallel-tests.mjs')
    expect(stdout).toContain('summary: 20 jobs, 20 passed, 0 failed')
    for (let n = 1; n <= 20; n++) expect(stdout).toContain(`[${String(n).padStart(2)}]   job ${n}: ok`)
    const failing = await example('parallel-tests.mjs', { FAIL_JOB: '7' }).then(
      () => null,
      (err: { code: number; stdout: string }) => err,
    )
    expect(failing?.code).toBe(1)
    expect(failing?.stdout).toContain('19 passed, 1 failed (jobs 7)')
    expect(failing?.stdout).toContain('[ 7] ! job 7: expected 49')
  }, 480_000)

  it('code-interpreter: state kept between cells, a chart, files in and out, an error and a timeout reported as results', async () => {
    const { stdout } = await example('code-interpreter.mjs')
    expect(stdout).toMatch(/cell 1: ok .*\n {2}stdout: 3 rows, total 242/)
    // The cell's value (the bars' repr) and its chart are two results, in the kernel's order.
    expect(stdout).toMatch(/cell 2: ok [^\n]*\n(?: {2}[^\n]*\n)*? {2}chart: \d+ bytes of PNG/)
    expect(stdout).toMatch(/cell 3: raised ZeroDivisionError[^\n]*\n {2}error: ZeroDivisionError: division by zero/)
    expect(stdout).toMatch(/cell 4: timed out/)
    expect(stdout).toMatch(/cell 5: ok .*\n {2}value: 242/)
    expect(stdout).toContain('file out: summary.json: {"rows": 3, "total": 242}')
  }, 600_000)

  it('benchmark: figures beside a same-run baseline', async () => {
    const { stdout } = await example('benchmark.mjs', { ROUNDS: '20' })
    expect(stdout).toMatch(/host spawn\(true\) +p50 [\d.]+ ms {2}p99 [\d.]+ ms {2}\(20 rounds\)/)
    expect(stdout).toMatch(/sandbox exec\(true\) +p50 [\d.]+ ms/)
    expect(stdout).toMatch(/ratio p50: [\d.]+x the host baseline/)
  })
})
