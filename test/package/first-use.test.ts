/**
 * The first use of an image builds it, and the user sees that happen: through
 * create({ onProgress }) and the sandbox's `progress` event, and on a terminal from the CLI
 * (stderr only; nothing when stderr is not a terminal or with --json). Each case starts from an
 * empty image cache of its own.
 * (Issue 16 point 4.)
 */
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Writable } from 'node:stream'
import { promisify } from 'node:util'
import { afterAll, describe, expect, it } from 'vitest'
import { firstUseProgress } from '../../lib/cli/first-use-progress.js'
import type { ProgressEvent } from '../../lib/images/index.js'
import { testRuntime } from '../helpers/runtime.js'

const run = promisify(execFile)
const repoRoot = path.resolve(import.meta.dirname, '../..')
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-first-use-'))

afterAll(() => {
  fs.rmSync(work, { recursive: true, force: true })
})

describe('first use of an image', () => {
  // base: the quickest preset to build; what reports the build is the same for every preset.
  it('create({ image: "base" }) from an empty cache reports the build through onProgress and the progress event', async () => {
    const rt = testRuntime({ cacheDir: path.join(work, 'cache-lib', 'images') })
    try {
      const viaOption: ProgressEvent[] = []
      const viaEvent: ProgressEvent[] = []
      const sb = await rt.create({
        image: 'base',
        driver: 'namespace',
        wait: false,
        onProgress: (e) => viaOption.push(e),
      })
      sb.on('progress', (e) => viaEvent.push(e))
      await sb.ready({ timeoutMs: 300_000 })
      expect(viaOption.length).toBeGreaterThan(1)
      expect(viaOption.at(-1)!.percent).toBe(100)
      for (let i = 1; i < viaOption.length; i++)
        expect(viaOption[i].percent).toBeGreaterThanOrEqual(viaOption[i - 1].percent)
      expect(new Set(viaOption.map((e) => e.stage))).toContain('download')
      // The event listener was attached after create() returned: it saw the rest of the build.
      expect(viaEvent.length).toBeGreaterThan(0)
      expect(viaEvent.at(-1)).toEqual(viaOption.at(-1))
      expect((await sb.exec('sh', ['-c', 'echo $((6 * 7))'])).stdout).toBe('42\n')

      // Cached now: a second create reports nothing.
      const quiet: ProgressEvent[] = []
      const again = await rt.create({ image: 'base', driver: 'namespace', onProgress: (e) => quiet.push(e) })
      expect(quiet).toEqual([])
      await again.stop()
      await sb.stop()
    } finally {
      await rt.close()
    }
  }, 400_000)

  it('krunbox run on a terminal draws the build on stderr; stdout carries only the command output', async () => {
    const env = {
      ...process.env,
      XDG_CACHE_HOME: path.join(work, 'cache-cli'),
      XDG_STATE_HOME: path.join(work, 'state'),
      XDG_CONFIG_HOME: path.join(work, 'config'),
    }
    const cli = `node ${path.join(repoRoot, 'dist/cli.js')}`
    // script(1) gives the CLI a terminal on its stdin/stdout/stderr; stdout is sent to a file to tell them apart.
    const outFile = path.join(work, 'stdout.txt')
    const { stdout: terminal } = await run('script', ['-qec', `${cli} run base -- echo hi > ${outFile}`, '/dev/null'], {
      env,
      timeout: 300_000,
    })
    expect(terminal).toContain('krunbox: building image base (first use; cached afterwards)')
    expect(terminal).toMatch(/\[#+\.*\] +\d+% /)
    expect(terminal).toMatch(/100%/)
    expect(fs.readFileSync(outFile, 'utf8')).toBe('hi\n')
  }, 300_000)

  it('nothing is drawn with --json, nor when stderr is not a terminal', () => {
    let written = ''
    const sink = new Writable({
      write(chunk: Buffer, _encoding, done) {
        written += chunk.toString()
        done()
      },
    })
    const tty = Object.assign(sink, { isTTY: true }) as unknown as NodeJS.WriteStream
    const json = firstUseProgress('python', { json: true, stderr: tty })
    expect(json.onProgress).toBeUndefined()
    const piped = Object.assign(new Writable({ write: (_c, _e, done) => done() }), {
      isTTY: false,
    }) as unknown as NodeJS.WriteStream
    expect(firstUseProgress('python', { stderr: piped }).onProgress).toBeUndefined()
    const shown = firstUseProgress('python', { stderr: tty })
    shown.onProgress!({ stage: 'download', percent: 40 })
    shown.done()
    expect(written).toContain('building image python')
    expect(written).toContain(' 40% download')
  })
})
