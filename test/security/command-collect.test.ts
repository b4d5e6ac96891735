/**
 * exec({ collect }) writes what a command left in the sandbox into the caller's
 * directory `to`. The sandbox (root with every capability) chooses the contents, another local
 * user may write to `to`, and a command id with an idempotency key is predictable: links planted
 * at the names the export writes, a `to` swapped for a link while the command runs, and a sandbox
 * writing past maxBytes must each be held.
 * (Issue 33, item 7.)
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runtime } from '../../lib/runtime.js'
import { commandIdForKey, type Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'

const NOBODY = 65534
const CANARY = 'root-owned, must never change\n'
let rt: Runtime
let sb: Sandbox
let work: string
let canaryDir: string
let canary: string

function asNobody(argv: string[]): void {
  execFileSync('setpriv', [`--reuid=${NOBODY}`, `--regid=${NOBODY}`, '--clear-groups', ...argv], { stdio: 'pipe' })
}

beforeAll(async () => {
  rt = testRuntime()
  sb = await rt.create({
    image: 'base',
    driver: 'namespace',
    capabilities: ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'SETUID', 'SETGID'],
  })
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-sec-collect-'))
  fs.chmodSync(work, 0o755)
  canaryDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-sec-canary-'))
  canary = path.join(canaryDir, 'canary')
  fs.writeFileSync(canary, CANARY, { mode: 0o644 })
})
afterAll(async () => {
  await rt.close()
  fs.rmSync(work, { recursive: true, force: true })
  fs.rmSync(canaryDir, { recursive: true, force: true })
})

describe('exec collect', () => {
  it('exec collect: symlinks another user planted at the names a predictable command id writes are refused (never written through)', async () => {
    const to = path.join(work, 'shared')
    fs.mkdirSync(to)
    fs.chmodSync(to, 0o1777)
    const id = commandIdForKey('collect-predictable')
    const names = [`${id}.tar`, `${id}.json`]
    for (let pid = process.pid - 2; pid <= process.pid + 2; pid++)
      names.push(`.${id}.tar.${pid}.tmp`, `.${id}.json.${pid}.tmp`)
    for (const name of names) asNobody(['ln', '-s', canary, path.join(to, name)])
    const r = await sb.exec('sh', ['-c', 'mkdir -p /workspace/p && echo kept > /workspace/p/a.txt'], {
      idempotencyKey: 'collect-predictable',
      collect: { paths: ['/workspace/p'], to },
    })
    expect(fs.readFileSync(canary, 'utf8')).toBe(CANARY)
    expect(r.artifacts).toMatchObject({ tar: path.join(to, `${id}.tar`), files: ['/workspace/p/a.txt'], error: null })
    expect(fs.lstatSync(path.join(to, `${id}.tar`)).isFile()).toBe(true)
    expect(fs.lstatSync(path.join(to, `${id}.json`)).isFile()).toBe(true)
    expect(execFileSync('tar', ['-xOf', path.join(to, `${id}.tar`), 'workspace/p/a.txt'], { encoding: 'utf8' })).toBe(
      'kept\n',
    )
  })

  it('exec collect: a `to` swapped for a symlink by its owner (another user) while the command runs receives nothing', async () => {
    const parent = path.join(work, 'nobodys')
    fs.mkdirSync(parent)
    fs.chownSync(parent, NOBODY, NOBODY)
    const to = path.join(parent, 'out')
    asNobody(['mkdir', to])
    // The command waits for the host's go-ahead (a file it writes once the swap is done).
    const running = sb.exec(
      'sh',
      ['-c', 'mkdir -p /workspace/s && echo x > /workspace/s/a && while [ ! -e /workspace/go ]; do sleep 0.02; done'],
      { collect: { paths: ['/workspace/s'], to } },
    )
    asNobody(['mv', to, path.join(parent, 'moved')])
    asNobody(['ln', '-s', canaryDir, to])
    await sb.fs.writeFile('/workspace/go', '')
    const r = await running
    expect(r.artifacts).toMatchObject({ tar: '', error: 'S216' })
    expect(fs.readdirSync(canaryDir)).toEqual(['canary'])
    expect(fs.readdirSync(path.join(parent, 'moved'))).toEqual([])
  })

  it('exec collect: root in the sandbox writing far past maxBytes is held to the cap (S403, what fit kept)', async () => {
    const to = fs.mkdtempSync(path.join(work, 'cap-'))
    const maxBytes = 1024 * 1024
    const r = await sb.exec(
      'sh',
      [
        '-c',
        'mkdir -p /workspace/big && head -c 1000 /dev/zero > /workspace/big/a && head -c 33554432 /dev/zero > /workspace/big/b && head -c 1000 /dev/zero > /workspace/big/c',
      ],
      {
        collect: { paths: ['/workspace/big'], to, maxBytes },
      },
    )
    expect(r.artifacts).toMatchObject({
      files: ['/workspace/big/a', '/workspace/big/c'],
      bytes: 2000,
      truncated: true,
      error: 'S403',
    })
    expect(fs.statSync(r.artifacts!.tar).size).toBeLessThan(maxBytes)
  })
})
