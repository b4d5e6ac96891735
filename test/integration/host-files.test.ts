/**
 * What the host writes and reads on the sandbox's behalf never reaches past what the
 * sandbox may touch: downloads stay in their destination, sandbox-writable control files are read
 * with bounds, a state record's pid is trusted only when it is the sandbox's, and unusable inputs
 * (a FIFO to upload, a state directory in /proc) answer at once with a coded error.
 * (Issue 20.)
 */
import { execFileSync, spawn } from 'node:child_process'
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { Readable } from 'node:stream'
import tar from 'tar-stream'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { cgroupMode } from '../../lib/drivers/cgroups.js'
import { SandboxError } from '../../lib/errors.js'
import { Runtime, runtimeState } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { processStartTime, sha256, type SandboxRecord } from '../../lib/state.js'
import { unpack } from '../../lib/tar.js'
import { testRuntime } from '../helpers/runtime.js'

let rt: Runtime
let sb: Sandbox
let scratch: string

beforeAll(async () => {
  rt = testRuntime()
  sb = await rt.create({ image: 'base', driver: 'namespace' })
  scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-hostfiles-'))
})
afterAll(async () => {
  await rt.close()
  fs.rmSync(scratch, { recursive: true, force: true })
})

async function failure(p: Promise<unknown>): Promise<SandboxError> {
  const err = await p.then(
    () => null,
    (e) => e,
  )
  expect(err).toBeInstanceOf(SandboxError)
  return err as SandboxError
}

/** A host directory outside every destination, with a file whose content must never change. */
function outside(): { dir: string; untouched(): void } {
  const dir = fs.mkdtempSync(path.join(scratch, 'outside-'))
  fs.writeFileSync(path.join(dir, 'victim'), 'original')
  return {
    dir,
    untouched() {
      expect(fs.readdirSync(dir)).toEqual(['victim'])
      expect(fs.readFileSync(path.join(dir, 'victim'), 'utf8')).toBe('original')
    },
  }
}

type Entry = {
  name: string
  type?: 'file' | 'directory' | 'symlink' | 'link'
  linkname?: string
  body?: string
  mode?: number
}

/** A tar stream as a hostile agent could send it. */
function hostileTar(entries: Entry[]): Readable {
  const pack = tar.pack()
  for (const e of entries) {
    const header = { name: e.name, type: e.type ?? 'file', linkname: e.linkname, mode: e.mode ?? 0o644 }
    if (header.type === 'file') pack.entry(header, e.body ?? 'pwned')
    else pack.entry(header)
  }
  pack.finalize()
  return Readable.from(pack as unknown as AsyncIterable<Buffer>)
}

describe('fs.download of a directory stays inside its destination', () => {
  it('downloading the same sandbox directory twice never writes through the symlink the first one planted', async () => {
    const o = outside()
    const dest = path.join(scratch, 'twice')
    // First: `link` is a symlink to the host directory, `f` a symlink to the host file.
    await sb.exec('sh', [
      '-c',
      `mkdir -p /workspace/d && ln -s ${o.dir} /workspace/d/link && ln -s ${o.dir}/victim /workspace/d/f`,
    ])
    await sb.fs.download('/workspace/d', dest)
    expect(fs.readlinkSync(path.join(dest, 'link'))).toBe(o.dir)
    // Then the sandbox turns them into a directory with a file in it and a regular file.
    await sb.exec('sh', [
      '-c',
      'cd /workspace/d && rm link f && mkdir link && echo pwned > link/victim && echo pwned > f',
    ])
    await sb.fs.download('/workspace/d', dest)
    expect(fs.lstatSync(path.join(dest, 'link')).isDirectory()).toBe(true)
    expect(fs.readFileSync(path.join(dest, 'link/victim'), 'utf8')).toBe('pwned\n')
    expect(fs.lstatSync(path.join(dest, 'f')).isFile()).toBe(true)
    o.untouched()
  })

  const cases: [string, (dir: string) => Entry[]][] = [
    [
      'a symlink entry, then a file beneath it',
      (dir) => [{ name: 'link', type: 'symlink', linkname: dir }, { name: 'link/victim' }],
    ],
    [
      'a symlink entry, then a directory and a file beneath it',
      (dir) => [
        { name: 'l', type: 'symlink', linkname: dir },
        { name: 'l/sub', type: 'directory' },
        { name: 'l/sub/x' },
      ],
    ],
    ['a `../` entry', (dir) => [{ name: `../${path.basename(dir)}/victim` }]],
    ['a `../` buried in the name', (dir) => [{ name: `a/../../${path.basename(dir)}/victim` }]],
    ['an absolute path', (dir) => [{ name: `${dir}/victim` }]],
    ['a hardlink to a host file', (dir) => [{ name: 'h', type: 'link', linkname: `${dir}/victim` }]],
    ['a hardlink through `..`', (dir) => [{ name: 'h', type: 'link', linkname: `../${path.basename(dir)}/victim` }]],
    ['a hardlink to a file the stream never sent', () => [{ name: 'h', type: 'link', linkname: 'not-sent' }]],
    [
      'a symlink to a host file, then a file of the same name beneath it',
      (dir) => [{ name: 'v', type: 'symlink', linkname: `${dir}/victim` }, { name: 'v/x' }],
    ],
  ]
  for (const [name, entries] of cases) {
    it(`refuses a hostile tar stream: ${name} (S210), leaving no trace outside`, async () => {
      const o = outside()
      const dest = fs.mkdtempSync(path.join(scratch, 'dest-'))
      // The destination sits beside the outside directory, so `../<outside>` names it.
      const err = await failure(unpack(hostileTar(entries(o.dir)), dest))
      expect(err.code).toBe('S210')
      expect(err.message).toContain(dest)
      o.untouched()
    })
  }

  it('an existing symlink in the destination is replaced by a file entry, never written through; setuid bits are dropped', async () => {
    const o = outside()
    const dest = fs.mkdtempSync(path.join(scratch, 'dest-'))
    fs.symlinkSync(path.join(o.dir, 'victim'), path.join(dest, 'f'))
    await unpack(
      hostileTar([
        { name: 'f', body: 'new', mode: 0o4755 },
        { name: 'h', type: 'link', linkname: 'f' },
      ]),
      dest,
    )
    expect(fs.lstatSync(path.join(dest, 'f')).isFile()).toBe(true)
    expect(fs.statSync(path.join(dest, 'f')).mode & 0o7777).toBe(0o755)
    expect(fs.statSync(path.join(dest, 'h')).ino).toBe(fs.statSync(path.join(dest, 'f')).ino)
    o.untouched()
  })
})

describe('files the sandbox can write are read with bounds', () => {
  const activity = () => path.join(runtimeState(rt).controlDir(sb.id), 'activity.json')
  const listOther = () => {
    // A second runtime on the same state directory reads the agent's activity.json (it does not own the sandbox).
    const other = new Runtime({ stateDir: runtimeState(rt).root })
    const row = other.list().find((r) => r.id === sb.id)
    void other.close()
    return row
  }
  const hostile: [string, () => void][] = [
    ['a symlink to /dev/zero', () => fs.symlinkSync('/dev/zero', activity())],
    [
      'a 1 GiB sparse file',
      () => {
        fs.writeFileSync(activity(), '{"activeCommands":')
        fs.truncateSync(activity(), 1024 ** 3)
      },
    ],
    ['invalid JSON', () => fs.writeFileSync(activity(), '{"activeCommands": [')],
    ['JSON of the wrong shape', () => fs.writeFileSync(activity(), '{"activeCommands": -5, "paused": "yes"}')],
    ['a FIFO', () => execFileSync('mkfifo', [activity()])],
  ]
  for (const [name, plant] of hostile) {
    it(`activity.json as ${name}: list() answers at once and reports the sandbox idle`, () => {
      fs.rmSync(activity(), { force: true })
      plant()
      try {
        const row = listOther()
        expect(row?.status).toBe('idle')
        expect(row?.execInProgress).toBe(false)
      } finally {
        fs.rmSync(activity(), { force: true })
      }
    })
  }
})

describe('a forged state record never makes the host kill or remove anything', () => {
  it('a record naming an unrelated host process and a foreign cgroup: new Runtime() leaves both alone', async () => {
    const stateDir = fs.mkdtempSync(path.join(scratch, 'forged-'))
    const victim = spawn('sleep', ['300'], { stdio: 'ignore' })
    await new Promise((r) => victim.once('spawn', r))
    const foreignCgroup =
      cgroupMode() === 'v2' ? '/sys/fs/cgroup/kb-forged-victim' : '/sys/fs/cgroup/pids/kb-forged-victim'
    fs.mkdirSync(foreignCgroup, { recursive: true })
    // The unrelated process lives in the foreign cgroup: emptying that group would kill it.
    fs.writeFileSync(path.join(foreignCgroup, 'cgroup.procs'), String(victim.pid))
    const victimDir = path.join(scratch, 'victim-dir')
    fs.mkdirSync(victimDir, { recursive: true })
    try {
      const forge = (id: string, patch: Partial<SandboxRecord>) => {
        fs.mkdirSync(path.join(stateDir, id, 'ctl'), { recursive: true })
        const record: SandboxRecord = {
          id,
          name: null,
          image: 'base',
          imageVersion: 'x',
          driver: 'namespace',
          pid: victim.pid!,
          pidStartTime: processStartTime(victim.pid!)!,
          ownerPid: 1,
          createdAt: 0,
          expiresAt: null,
          idleTimeoutMs: 0,
          tokenSha256: 'x',
          detached: true,
          metadata: {},
          env: {},
          cgroupDirs: [],
          ...patch,
        }
        fs.writeFileSync(path.join(stateDir, id, 'state.json'), JSON.stringify(record))
      }
      // The right pid and start time, but not in a krunbox cgroup / not bwrap: not a sandbox.
      forge('00000000-0000-4000-8000-000000000001', {})
      forge('00000000-0000-4000-8000-000000000002', { cgroupDirs: [foreignCgroup] })
      forge('00000000-0000-4000-8000-000000000003', { cgroupDirs: [victimDir] })
      forge('00000000-0000-4000-8000-000000000004', {
        cgroupDirs: ['/sys/fs/cgroup/krunbox/00000000-0000-4000-8000-00000000000f'],
      })
      // One more forgery made after the sweep, with a known token: attach (whose stop() would kill the pid) refuses it.
      const forged = new Runtime({ stateDir })
      forge('00000000-0000-4000-8000-000000000005', { tokenSha256: sha256('known') })
      expect(
        (await failure(forged.attach('00000000-0000-4000-8000-000000000005', { accessToken: 'known' }))).code,
      ).toBe('S002')
      expect(forged.list()).toEqual([])
      await forged.close()
      expect(processStartTime(victim.pid!)).not.toBeNull()
      expect(fs.readFileSync(path.join(foreignCgroup, 'cgroup.procs'), 'utf8')).toContain(String(victim.pid))
      expect(fs.existsSync(victimDir)).toBe(true)
      // The well-formed forgery names no live sandbox: its entry is swept (nothing else is touched).
      expect(fs.existsSync(path.join(stateDir, '00000000-0000-4000-8000-000000000001'))).toBe(false)
    } finally {
      victim.kill('SIGKILL')
      await new Promise((r) => victim.once('exit', r))
      fs.rmdirSync(foreignCgroup)
    }
  })

  it('a real sandbox is still recognised as alive by its start time and cgroup (or executable)', () => {
    const other = new Runtime({ stateDir: runtimeState(rt).root })
    expect(other.list().map((r) => r.id)).toContain(sb.id)
    void other.close()
  })
})

describe('attach connects only to the socket itself', () => {
  it('a symlink the sandbox planted at ctl/agent.sock (to another host socket) is never followed (S205)', async () => {
    const hostSocket = path.join(scratch, 'host-service.sock')
    let connections = 0
    const server = net.createServer((c) => {
      connections++
      c.destroy()
    })
    await new Promise<void>((r) => server.listen(hostSocket, r))
    const ctl = runtimeState(rt).controlDir(sb.id)
    fs.renameSync(path.join(ctl, 'agent.sock'), path.join(ctl, 'agent.sock.real'))
    try {
      fs.symlinkSync(hostSocket, path.join(ctl, 'agent.sock'))
      const err = await failure(rt.attach(sb.id, { accessToken: sb.accessToken! }))
      expect(err.code).toBe('S205')
      expect(err.message).toContain(sb.id)
      fs.rmSync(path.join(ctl, 'agent.sock'))
      fs.writeFileSync(path.join(ctl, 'agent.sock'), 'not a socket')
      expect((await failure(rt.attach(sb.id, { accessToken: sb.accessToken! }))).code).toBe('S205')
      expect(connections).toBe(0)
    } finally {
      fs.rmSync(path.join(ctl, 'agent.sock'), { force: true })
      fs.renameSync(path.join(ctl, 'agent.sock.real'), path.join(ctl, 'agent.sock'))
      server.close()
    }
    // The real socket, through its descriptor, still works.
    const again = await rt.attach(sb.id, { accessToken: sb.accessToken! })
    expect((await again.exec('echo', ['ok'])).stdout).toBe('ok\n')
  })
})

describe('unusable inputs answer at once', () => {
  it('uploading a host FIFO, socket or character device is S212, without blocking', async () => {
    const fifo = path.join(scratch, 'fifo')
    execFileSync('mkfifo', [fifo])
    expect((await failure(sb.fs.upload(fifo, '/workspace/fifo'))).code).toBe('S212')
    expect((await failure(sb.fs.upload('/dev/null', '/workspace/null'))).code).toBe('S212')
    const err = await failure(sb.fs.upload(fifo, '/workspace/fifo'))
    expect(err.message).toContain(fifo)
    // A FIFO inside an uploaded directory is skipped, not waited on.
    const tree = fs.mkdtempSync(path.join(scratch, 'tree-'))
    fs.writeFileSync(path.join(tree, 'a'), 'A')
    execFileSync('mkfifo', [path.join(tree, 'pipe')])
    await sb.fs.upload(tree, '/workspace/tree-with-fifo')
    expect((await sb.exec('ls', ['/workspace/tree-with-fifo'])).stdout).toBe('a\n')
  })

  for (const stateDir of ['/proc/x', '/proc/self/krunbox', '/sys/kernel/krunbox', '/dev/null/x', '/etc/hostname']) {
    it(`new Runtime({ stateDir: ${JSON.stringify(stateDir)} }) is S103 at once`, () => {
      let err: unknown
      try {
        new Runtime({ stateDir })
      } catch (e) {
        err = e
      }
      expect(err).toBeInstanceOf(SandboxError)
      expect((err as SandboxError).code).toBe('S103')
      expect((err as SandboxError).message).toContain(stateDir)
    })
  }
})
