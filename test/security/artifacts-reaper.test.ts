/**
 * The reaper copies a sandbox's artifacts out when no krunbox process is left (the host was
 * SIGKILLed). `to`'s parent may belong to another local user (here: nobody), who swaps it after
 * create for a link to a directory of its choosing (root's, with the same subdirectory name): the
 * reaper must write nothing there (it opens `to` and checks it is the directory seen at create),
 * and the record list({ includeHistorical }) reads back says S216.
 */
import { execFileSync, spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { testRuntime } from '../helpers/runtime.js'

const NOBODY = 65534
let work: string

function asNobody(argv: string[]): void {
  execFileSync('setpriv', [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', ...argv], { stdio: 'pipe' })
}

beforeAll(() => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-sec-reaper-'))
  fs.chmodSync(work, 0o755)
})
afterAll(() => fs.rmSync(work, { recursive: true, force: true }))

/** A host that creates one sandbox with artifacts, prints its id, then waits to be SIGKILLed. */
const HOST = `
  import { Runtime } from ${JSON.stringify(path.resolve('lib/runtime.ts'))}
  const rt = new Runtime({ stateDir: process.argv[1] })
  const sb = await rt.create({ image: 'base', driver: 'namespace', artifacts: { paths: ['/workspace/out'], to: process.argv[2] } })
  await sb.exec('sh', ['-c', 'mkdir out && echo kept > out/result.txt'])
  process.stdout.write(sb.id + '\\n')
  setInterval(() => {}, 60_000)
`

describe('artifacts collected by the reaper', () => {
  it('artifacts reaper: a parent of `to` swapped by another user for a link to another directory receives nothing after a host SIGKILL (record S216)', async () => {
    const stateDir = path.join(work, 'state')
    const shared = path.join(work, 'shared')
    fs.mkdirSync(shared)
    fs.chmodSync(shared, 0o1777)
    const mine = path.join(shared, 'nobodys')
    asNobody(['mkdir', '-p', path.join(mine, 'out')])
    const to = path.join(mine, 'out')
    // The attacker's target: a root-owned directory with the same subdirectory.
    const other = path.join(work, 'other')
    fs.mkdirSync(path.join(other, 'out'), { recursive: true })

    const host = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', HOST, stateDir, to], {
      stdio: ['ignore', 'pipe', 'inherit'],
    })
    try {
      const id = await new Promise<string>((resolve, reject) => {
        let out = ''
        host.stdout!.on('data', (d: Buffer) => {
          out += d.toString()
          if (out.includes('\n')) resolve(out.split('\n')[0])
        })
        host.once('exit', (code) => reject(new Error(`host exited with ${code}`)))
      })
      asNobody(['mv', mine, path.join(shared, 'moved')])
      asNobody(['ln', '-s', other, mine])
      const exited = new Promise((resolve) => host.once('exit', resolve))
      host.kill('SIGKILL')
      await exited
      // The reaper writes the history line after it collected (or refused to), then removes the entry.
      await expect
        .poll(() => fs.existsSync(path.join(stateDir, '.history', `${id}.json`)), { timeout: 30_000, interval: 100 })
        .toBe(true)
      await expect.poll(() => fs.existsSync(path.join(stateDir, id)), { timeout: 10_000, interval: 50 }).toBe(false)
      expect(fs.readdirSync(path.join(other, 'out'))).toEqual([])
      expect(fs.readdirSync(path.join(shared, 'moved', 'out'))).toEqual([])
      const rt = testRuntime({ stateDir })
      try {
        const row = rt.list({ includeHistorical: true }).find((r) => r.id === id)
        expect(row?.destroyedReason).toBe('host_exit')
        expect(row?.artifacts).toMatchObject({ error: 'S216', files: [] })
      } finally {
        await rt.close()
      }
    } finally {
      host.kill('SIGKILL')
    }
  }, 90_000)
})
