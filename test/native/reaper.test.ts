/**
 * krunbox-reaper on its own (native/src/reaper/krunbox_reaper.c): state entries in a throwaway root,
 * processes standing in for the sandbox and its owner. A stand-in that "has ended" is named by
 * this process's pid with a start time that is not its own (the reaper counts it as gone).
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

import { collectArtifacts } from '../../lib/artifacts.js'
import { MESSAGES } from '../../lib/protocol/contract.gen.js'
import { reaperPath } from '../../lib/native.js'
import { spawnReaper, writeReaperParams, type ReaperSpec } from '../../lib/reaper.js'
import { processStartTime } from '../../lib/state.js'
import { ensureNativeBuilt, makeTempDir, processState, until } from './helpers.js'

const tmp = makeTempDir('krunbox-reaper-')
const children: ChildProcess[] = []

beforeAll(() => ensureNativeBuilt())
afterAll(() => {
  for (const c of children) c.kill('SIGKILL')
  tmp.cleanup()
})

const newId = () => crypto.randomUUID()

/** A state root with one entry holding a record and a control dir. */
function stateRoot(): { root: string; id: string; entry: string; ctl: string } {
  const root = fs.mkdtempSync(path.join(tmp.dir, 'state-'))
  fs.mkdirSync(path.join(root, '.history'))
  const id = newId()
  const entry = path.join(root, id)
  fs.mkdirSync(path.join(entry, 'ctl'), { recursive: true })
  fs.writeFileSync(path.join(entry, 'state.json'), '{}')
  return { root, id, entry, ctl: path.join(entry, 'ctl') }
}

function spec(root: string, id: string, patch: Partial<ReaperSpec> = {}): ReaperSpec {
  return { stateRoot: root, id, pid: process.pid, pidStartTime: '1', ownerPid: null, cgroupDirs: [], history: { name: null, image: 'base', createdAt: 1 }, ...patch }
}

/** Runs the reaper to its end on a parameter file (it must not wait: its sandbox has ended). */
function runReaper(params: string): void {
  execFileSync(reaperPath(), [params], { stdio: 'ignore', timeout: 10_000, env: {} })
}

/** The lines lib/reaper.ts writes for a spec, to spoil one by one. */
async function paramLines(s: ReaperSpec): Promise<string[]> {
  const file = (await writeReaperParams(s))!
  const lines = fs.readFileSync(file, 'utf8').split('\n')
  fs.rmSync(file)
  return lines.slice(0, -1)
}

function writeParams(root: string, text: string | Buffer): string {
  const file = path.join(root, `.reaper-${crypto.randomBytes(8).toString('hex')}`)
  fs.writeFileSync(file, text, { mode: 0o600, flag: 'wx' })
  return file
}

/** A process that runs until killed: a stand-in for a sandbox or its owner. */
async function standIn(): Promise<{ pid: number; start: string; child: ChildProcess }> {
  const child = spawn('sleep', ['600'], { stdio: 'ignore' })
  children.push(child)
  await new Promise((r) => child.once('spawn', r))
  return { pid: child.pid!, start: processStartTime(child.pid!)!, child }
}

/** The pidfds a process holds (the reaper holds one per process it waits on). */
function pidfds(pid: number): number {
  try {
    return fs.readdirSync(`/proc/${pid}/fd`).filter((fd) => {
      try {
        return fs.readlinkSync(`/proc/${pid}/fd/${fd}`) === 'anon_inode:[pidfd]'
      } catch {
        return false
      }
    }).length
  } catch {
    return 0
  }
}

const historyOf = (root: string, id: string) => JSON.parse(fs.readFileSync(path.join(root, '.history', `${id}.json`), 'utf8'))

describe('the parameter file', () => {
  it('well formed: the ended sandbox is retired, the file is gone', async () => {
    const { root, id, entry } = stateRoot()
    const file = (await writeReaperParams(spec(root, id)))!
    runReaper(file)
    expect(fs.existsSync(entry)).toBe(false)
    expect(fs.existsSync(file)).toBe(false)
    expect(historyOf(root, id)).toMatchObject({ id, image: 'base', reason: 'crashed' })
    expect(historyOf(root, id).endedAt).toBeGreaterThan(Date.now() - 60_000)
  })

  const spoiled: Array<[string, (lines: string[], root: string) => string[] | string | Buffer]> = [
    ['cut short (no end line)', (l) => l.slice(0, -1)],
    ['cut short within a line', (l) => l.join('\n').slice(0, 60)],
    ['cut short after the end line lost its newline', (l) => l.join('\n')],
    ['empty', () => ''],
    ['a line after the end line', (l) => [...l, 'more']],
    ['a relative root', (l, root) => [path.relative(process.cwd(), root) || '.', ...l.slice(1)]],
    ['a root with a .. component', (l, root) => [`${root}/../${path.basename(root)}`, ...l.slice(1)]],
    ['an upper-case id', (l) => [l[0], l[1].toUpperCase(), ...l.slice(2)]],
    ['an id that is a path', (l) => [l[0], '../../../../../../../../tmp/xx-xxxx-xxxx-xxxx-xxxxxxxxxxx', ...l.slice(2)]],
    ['a short id', (l) => [l[0], l[1].slice(1), ...l.slice(2)]],
    ['a pid with a letter', (l) => [...l.slice(0, 2), `${l[2]}x`, ...l.slice(3)]],
    ['pid 0', (l) => [...l.slice(0, 2), '0', ...l.slice(3)]],
    ['no start time', (l) => [...l.slice(0, 3), '', ...l.slice(4)]],
    ['a negative owner', (l) => [...l.slice(0, 4), '-1', ...l.slice(5)]],
    ['a prefix of another sandbox', (l) => [...l.slice(0, 5), `{"id":"${newId()}"`, ...l.slice(6)]],
    ['a prefix with a control character', (l) => [...l.slice(0, 5), `${l[5]},"x":"\t"`, ...l.slice(6)]],
    ['an artifacts dir without a cap', (l) => [...l.slice(0, 6), '/tmp', '', ...l.slice(8)]],
    ['a relative artifacts dir', (l) => [...l.slice(0, 6), 'tmp', '100', ...l.slice(8)]],
    ['an artifacts dir identity without a dir', (l) => [...l.slice(0, 8), '1:2', ...l.slice(9)]],
    ['an artifacts dir identity that is no <dev>:<ino>', (l) => [...l.slice(0, 6), '/tmp', '100', '12', ...l.slice(9)]],
    ['a cgroup dir of no sandbox (its processes would be killed)', (l) => [...l.slice(0, 9), '/sys/fs/cgroup/pids', 'end']],
    ['a cgroup dir of another sandbox', (l) => [...l.slice(0, 9), `/sys/fs/cgroup/pids/krunbox/${newId()}`, 'end']],
    ['a cgroup dir escaping by ..', (l) => [...l.slice(0, 9), `/sys/fs/cgroup/pids/krunbox/${l[1]}/../..`, 'end']],
    ['a cgroup dir outside /sys/fs/cgroup', (l) => [...l.slice(0, 9), `/tmp/krunbox/${l[1]}`, 'end']],
    ['a NUL byte', (l) => Buffer.from(l.join('\n').replace('base', 'ba\0se') + '\n')],
  ]
  it.each(spoiled)('%s: the reaper exits and touches nothing', async (_name, spoil) => {
    const { root, id, entry } = stateRoot()
    const out = spoil(await paramLines(spec(root, id)), root)
    const file = writeParams(root, Array.isArray(out) ? out.join('\n') + '\n' : out)
    runReaper(file)
    expect(fs.readdirSync(entry).sort()).toEqual(['ctl', 'state.json'])
    expect(fs.readdirSync(path.join(root, '.history'))).toEqual([])
    // It was read: consumed like any other (the sweep would remove it otherwise).
    expect(fs.existsSync(file)).toBe(false)
  })

  it('a file that is not a private regular one named .reaper-* is neither used nor removed', async () => {
    const { root, id, entry } = stateRoot()
    const lines = (await paramLines(spec(root, id))).join('\n') + '\n'
    const open = path.join(root, `.reaper-open`)
    fs.writeFileSync(open, lines, { mode: 0o644 })
    fs.chmodSync(open, 0o644)
    const named = path.join(root, 'params')
    fs.writeFileSync(named, lines, { mode: 0o600 })
    const link = path.join(root, '.reaper-link')
    fs.symlinkSync(named, link)
    for (const file of [open, named, link]) {
      runReaper(file)
      expect(fs.lstatSync(file)).toBeTruthy()
    }
    expect(fs.readdirSync(entry).sort()).toEqual(['ctl', 'state.json'])
  })
})

describe('waiting', () => {
  it('a sandbox process nobody reaps (a zombie) counts as ended at once', async () => {
    const { root, id, entry } = stateRoot()
    // `sleep 600` execs over the shell that started the background one: it never reaps it.
    const parent = spawn('sh', ['-c', 'sleep 600 & echo $!; exec sleep 600'], { stdio: ['ignore', 'pipe', 'ignore'] })
    children.push(parent)
    const pid = Number(await new Promise<string>((r) => parent.stdout!.once('data', (d) => r(String(d)))))
    const reaper = (await spawnReaper(spec(root, id, { pid, pidStartTime: processStartTime(pid)! })))!
    expect(await until(() => pidfds(reaper) === 1, 5000)).toBe(true)
    expect(fs.existsSync(entry)).toBe(true)
    process.kill(pid, 'SIGKILL')
    expect(await until(() => processState(pid) === 'Z', 5000)).toBe(true)
    // The shell reaper asked again only once a minute.
    expect(await until(() => !fs.existsSync(entry), 3000)).toBe(true)
    expect(historyOf(root, id).reason).toBe('crashed')
    expect(processState(pid)).toBe('Z')
  })

  it('an idle reaper is one task asleep in poll, with nothing of the sandbox on its command line or in its environment', async () => {
    const { root, id, entry } = stateRoot()
    const sandbox = await standIn()
    const owner = await standIn()
    const reaper = (await spawnReaper(spec(root, id, { pid: sandbox.pid, pidStartTime: sandbox.start, ownerPid: owner.pid })))!
    expect(await until(() => pidfds(reaper) === 2, 5000)).toBe(true)
    expect(fs.readdirSync(`/proc/${reaper}/task`)).toEqual([String(reaper)])
    expect(fs.readFileSync(`/proc/${reaper}/cmdline`, 'utf8')).not.toContain(id)
    expect(fs.readFileSync(`/proc/${reaper}/environ`, 'utf8')).toBe('')
    // Every fd but stdio and the two pidfds is closed.
    expect(fs.readdirSync(`/proc/${reaper}/fd`).length).toBe(5)
    expect(processState(reaper)).toBe('S')
    // Its owner ended: without artifacts nothing to do but wait on (the sandbox dies with its host).
    owner.child.kill('SIGKILL')
    expect(await until(() => pidfds(reaper) === 1, 5000)).toBe(true)
    expect(fs.existsSync(path.join(entry, 'ctl', 'host-exit'))).toBe(false)
    sandbox.child.kill('SIGKILL')
    expect(await until(() => !fs.existsSync(entry), 5000)).toBe(true)
    expect(historyOf(root, id).reason).toBe('host_exit')
    expect(await until(() => processState(reaper) === null, 5000)).toBe(true)
  })

  it('a sandbox with artifacts whose owner ended is asked to shut down (ctl/host-exit), never through a planted link', async () => {
    const outside = path.join(tmp.dir, `outside-${newId()}`)
    fs.writeFileSync(outside, 'keep')
    for (const planted of [false, true]) {
      const { root, id, entry, ctl } = stateRoot()
      if (planted) fs.symlinkSync(outside, path.join(ctl, 'host-exit'))
      const to = fs.mkdtempSync(path.join(tmp.dir, 'art-'))
      const sandbox = await standIn()
      const owner = await standIn()
      const reaper = (await spawnReaper(spec(root, id, { pid: sandbox.pid, pidStartTime: sandbox.start, ownerPid: owner.pid, artifacts: { to, maxBytes: 100 } })))!
      expect(await until(() => pidfds(reaper) === 2, 5000)).toBe(true)
      owner.child.kill('SIGKILL')
      expect(await until(() => pidfds(reaper) === 1, 5000)).toBe(true)
      if (planted) expect(fs.lstatSync(path.join(ctl, 'host-exit')).isSymbolicLink()).toBe(true)
      else expect(fs.statSync(path.join(ctl, 'host-exit')).isFile()).toBe(true)
      expect(fs.readFileSync(outside, 'utf8')).toBe('keep')
      // The agent would archive and end now.
      fs.writeFileSync(path.join(ctl, 'artifacts.tar'), 'tar')
      fs.writeFileSync(path.join(ctl, 'artifacts.json'), '{"files":["a"]}')
      fs.writeFileSync(path.join(ctl, 'exit.json'), '{"reason":"host_exit"}')
      sandbox.child.kill('SIGKILL')
      expect(await until(() => !fs.existsSync(entry), 5000)).toBe(true)
      expect(fs.readFileSync(path.join(to, `${id}.tar`), 'utf8')).toBe('tar')
      expect(fs.readFileSync(path.join(to, `${id}.json`), 'utf8')).toBe('{"files":["a"]}')
      expect(historyOf(root, id).reason).toBe('host_exit')
    }
    expect(fs.readFileSync(outside, 'utf8')).toBe('keep')
  })

  it('with a living owner, leaves the entry to it (which reads why the sandbox ended) and exits once it is gone', async () => {
    const { root, id, entry } = stateRoot()
    const sandbox = await standIn()
    const reaper = (await spawnReaper(spec(root, id, { pid: sandbox.pid, pidStartTime: sandbox.start, ownerPid: process.pid })))!
    expect(await until(() => pidfds(reaper) === 2, 5000)).toBe(true)
    sandbox.child.kill('SIGKILL')
    expect(await until(() => pidfds(reaper) === 1, 5000)).toBe(true)
    expect(fs.existsSync(entry)).toBe(true)
    fs.rmSync(entry, { recursive: true })
    expect(await until(() => processState(reaper) === null, 5000)).toBe(true)
    expect(fs.readdirSync(path.join(root, '.history'))).toEqual([])
  })
})

describe('retiring', () => {
  it('follows no link planted in the state entry: what they point at survives and is not copied', async () => {
    const { root, id, entry, ctl } = stateRoot()
    const outside = fs.mkdtempSync(path.join(tmp.dir, 'outside-'))
    fs.writeFileSync(path.join(outside, 'precious'), 'precious')
    fs.writeFileSync(path.join(outside, 'secret.tar'), 'secret')
    fs.writeFileSync(path.join(outside, 'exit.json'), '{"reason":"user_killed"}')
    fs.symlinkSync(outside, path.join(entry, 'escape'))
    fs.symlinkSync(path.join(outside, 'precious'), path.join(entry, 'file-link'))
    fs.symlinkSync(path.join(outside, 'secret.tar'), path.join(ctl, 'artifacts.tar'))
    fs.symlinkSync(path.join(outside, 'secret.tar'), path.join(ctl, 'artifacts.json'))
    fs.symlinkSync(path.join(outside, 'exit.json'), path.join(ctl, 'exit.json'))
    fs.mkdirSync(path.join(entry, 'deep', 'er'), { recursive: true })
    fs.symlinkSync(outside, path.join(entry, 'deep', 'er', 'escape'))
    const to = fs.mkdtempSync(path.join(tmp.dir, 'art-'))
    runReaper((await writeReaperParams(spec(root, id, { artifacts: { to, maxBytes: 1 << 20 } })))!)
    expect(fs.existsSync(entry)).toBe(false)
    expect(fs.readdirSync(outside).sort()).toEqual(['exit.json', 'precious', 'secret.tar'])
    expect(fs.readFileSync(path.join(outside, 'precious'), 'utf8')).toBe('precious')
    // Nothing copied: no archive, and the manifest the host writes for a sandbox killed before it archived.
    expect(fs.readdirSync(to)).toEqual([`${id}.json`])
    const host = fs.mkdtempSync(path.join(tmp.dir, 'host-'))
    const other = newId()
    collectArtifacts(fs.mkdtempSync(path.join(tmp.dir, 'ctl-')), other, { paths: ['/x'], to: host, when: 'always', maxBytes: 1 })
    expect(fs.readFileSync(path.join(to, `${id}.json`), 'utf8')).toBe(fs.readFileSync(path.join(host, `${other}.json`), 'utf8'))
    // The planted exit record was not read either.
    expect(historyOf(root, id).reason).toBe('crashed')
  })

  it('copies no archive over its cap but says so as the host does (S216), takes the reason from the exit record, and never replaces a manifest or history line already there', async () => {
    const { root, id, entry, ctl } = stateRoot()
    fs.writeFileSync(path.join(ctl, 'artifacts.tar'), 'x'.repeat(1000))
    fs.writeFileSync(path.join(ctl, 'artifacts.json'), '{"files":[]}')
    fs.writeFileSync(path.join(ctl, 'exit.json'), '{"at":1,"reason":"idle_expired"}')
    // A name the manifest must escape as JSON.stringify does.
    const to = fs.mkdtempSync(path.join(tmp.dir, `art "q\\\t-`))
    const history = path.join(root, '.history', `${id}.json`)
    fs.writeFileSync(history, '{"the":"host line"}')
    const params = (await writeReaperParams(spec(root, id, { artifacts: { to, maxBytes: 1 } })))!
    // The cap the host passes is maxBytes + 64 MiB of tar slack; make it 100 bytes here.
    const text = fs.readFileSync(params, 'utf8').split('\n')
    text[7] = '100'
    fs.rmSync(params)
    runReaper(writeParams(root, text.join('\n')))
    expect(fs.existsSync(entry)).toBe(false)
    // Never a part of the archive: the host's manifest for it instead, in the host's words.
    const message = MESSAGES.fsIO({ path: to, reason: 'cannot copy the artifacts there: the archive is 1000 bytes, over the cap of 100' })
    expect(fs.readFileSync(path.join(to, `${id}.json`), 'utf8')).toBe(JSON.stringify({ files: [], bytes: 0, truncated: false, error: 'S216', message }))
    expect(fs.readFileSync(history, 'utf8')).toBe('{"the":"host line"}')
    expect(fs.readdirSync(path.join(root, '.history'))).toEqual([`${id}.json`])
    expect(fs.readdirSync(to).sort()).toEqual([`${id}.json`])

    // At its cap exactly, the archive is copied whole.
    const exact = stateRoot()
    fs.writeFileSync(path.join(exact.ctl, 'artifacts.tar'), 'y'.repeat(100))
    fs.writeFileSync(path.join(exact.ctl, 'artifacts.json'), '{"files":["y"]}')
    const exactParams = (await writeReaperParams(spec(exact.root, exact.id, { artifacts: { to, maxBytes: 1 } })))!
    const exactText = fs.readFileSync(exactParams, 'utf8').split('\n')
    exactText[7] = '100'
    fs.rmSync(exactParams)
    runReaper(writeParams(exact.root, exactText.join('\n')))
    expect(fs.readFileSync(path.join(to, `${exact.id}.tar`), 'utf8')).toBe('y'.repeat(100))
    expect(fs.readFileSync(path.join(to, `${exact.id}.json`), 'utf8')).toBe('{"files":["y"]}')

    // An archive without its manifest (killed while archiving): the host's S205 manifest, as the host writes it.
    const cut = stateRoot()
    fs.writeFileSync(path.join(cut.ctl, 'artifacts.tar'), 'z'.repeat(10))
    fs.writeFileSync(path.join(cut.ctl, 'exit.json'), '{"at":1,"reason":"idle_expired"}')
    const byHost = fs.mkdtempSync(path.join(tmp.dir, 'host-'))
    collectArtifacts(cut.ctl, cut.id, { paths: ['/x'], to: byHost, when: 'always', maxBytes: 1000 })
    runReaper((await writeReaperParams(spec(cut.root, cut.id, { artifacts: { to, maxBytes: 1000 } })))!)
    expect(JSON.parse(fs.readFileSync(path.join(to, `${cut.id}.json`), 'utf8')).error).toBe('S205')
    expect(fs.readFileSync(path.join(to, `${cut.id}.json`), 'utf8')).toBe(fs.readFileSync(path.join(byHost, `${cut.id}.json`), 'utf8'))
    expect(fs.readFileSync(path.join(to, `${cut.id}.tar`), 'utf8')).toBe('z'.repeat(10))

    // Ended without an archive, where the host already wrote its manifest: it stays.
    const second = stateRoot()
    fs.writeFileSync(path.join(to, `${second.id}.json`), '{"host":true}')
    runReaper((await writeReaperParams(spec(second.root, second.id, { artifacts: { to, maxBytes: 1 } })))!)
    expect(fs.readFileSync(path.join(to, `${second.id}.json`), 'utf8')).toBe('{"host":true}')
    expect(historyOf(second.root, second.id).reason).toBe('crashed')
    expect(fs.readdirSync(to).filter((n) => n.endsWith('.tmp'))).toEqual([])
  })

  // cgroup v1 (each pid listed in cgroup.procs is killed) and v2 (cgroup.kill), where this host has them.
  const hierarchies = ['/sys/fs/cgroup/pids', '/sys/fs/cgroup/unified', '/sys/fs/cgroup'].filter((h) => fs.existsSync(path.join(h, 'cgroup.procs')))
  it.for(hierarchies.length > 0 ? hierarchies : ['none'])('kills what is left in the sandbox cgroups and removes them bottom-up (%s)', async (hierarchy, ctx) => {
    const { root, id, entry } = stateRoot()
    const top = path.join(hierarchy, 'krunbox', id)
    try {
      if (process.getuid?.() !== 0) throw new Error('not root')
      fs.mkdirSync(path.join(top, 'workload', 'nested'), { recursive: true })
    } catch {
      ctx.skip()
      return
    }
    const procs = path.join(top, 'workload', 'nested', 'cgroup.procs')
    const left = spawn('sh', ['-c', `echo $$ > ${procs} && exec sleep 600`], { stdio: 'ignore' })
    children.push(left)
    const exited = new Promise((r) => left.once('exit', (_code, signal) => r(signal)))
    expect(await until(() => fs.readFileSync(procs, 'utf8').trim() === String(left.pid), 5000)).toBe(true)
    runReaper((await writeReaperParams(spec(root, id, { cgroupDirs: [top] })))!)
    expect(await exited).toBe('SIGKILL')
    expect(fs.existsSync(top)).toBe(false)
    expect(fs.existsSync(entry)).toBe(false)
  })
})
