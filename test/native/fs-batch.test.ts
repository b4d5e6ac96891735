/**
 * fsBatch: mkdir, write and open in one libuv pool task (issue 22: each fs/promises call woke a
 * pool thread, which cost the main thread 50-80 us here). In order; the first failure stops the
 * batch, closes what it opened and names its call and path; never through a link. And
 * removeCgroup, which empties and removes a cgroup as a sandbox's end does.
 */
import { closeSync, existsSync, mkdirSync, readdirSync, readFileSync, readlinkSync, statSync, symlinkSync, writeFileSync } from 'node:fs'
import net from 'node:net'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { isSandboxError } from '../../lib/errors.js'
import { fsBatch, probe, spawn, waitForExit } from '../../lib/native.js'
import { ensureNativeBuilt, makeTempDir } from './helpers.js'

ensureNativeBuilt()
const tmp = makeTempDir('krunbox-fs-batch-')
afterAll(() => tmp.cleanup())

const openFds = () => new Set(readdirSync('/proc/self/fd'))

describe('fsBatch()', () => {
  it('makes directories, writes existing files and opens files, in order, with the fds in order', async () => {
    const dir = join(tmp.dir, 'a')
    const file = join(dir, 'b', 'value')
    const fds = await fsBatch([
      { op: 'mkdir', path: dir, mode: 0o700 },
      { op: 'mkdir', path: dir, existOk: true },
      { op: 'mkdir', path: join(dir, 'b') },
      { op: 'open', path: join(dir, 'b'), flags: 'r' },
    ])
    writeFileSync(file, 'old contents that are longer')
    const more = await fsBatch([
      { op: 'write', path: file, data: 'new' },
      { op: 'open', path: file, flags: 'r' },
      { op: 'open', path: file, flags: 'w' },
    ])
    expect(statSync(dir).mode & 0o777).toBe(0o700)
    // Written over the start, as a cgroup file takes it (no O_TRUNC).
    expect(readFileSync(file, 'utf8')).toBe('new contents that are longer')
    for (const fd of [...fds, ...more]) expect(readlinkSync(`/proc/self/fd/${fd}`)).toMatch(/\/a\/b(\/value)?$/)
    expect(more).toHaveLength(2)
    for (const fd of [...fds, ...more]) closeSync(fd)
  })

  it('64 batches at once each get their own directories and fds, and leave no fd behind', async () => {
    const before = openFds()
    const results = await Promise.all(
      Array.from({ length: 64 }, async (_, i) => {
        const dir = join(tmp.dir, `many-${i}`)
        const fds = await fsBatch([
          { op: 'mkdir', path: dir },
          { op: 'open', path: dir, flags: 'r' },
          { op: 'open', path: tmp.dir, flags: 'r' },
        ])
        return { dir, fds }
      }),
    )
    const all = results.flatMap((r) => r.fds)
    expect(new Set(all).size).toBe(128)
    for (const { dir, fds } of results) expect(readlinkSync(`/proc/self/fd/${fds[0]}`)).toBe(dir)
    for (const fd of all) closeSync(fd)
    expect(openFds()).toEqual(before)
  })

  it('stops at the first failure, closing what it opened, naming the call and the path', async () => {
    const dir = join(tmp.dir, 'c')
    mkdirSync(dir)
    writeFileSync(join(dir, 'f'), 'x')
    const before = openFds()
    const err = await fsBatch([
      { op: 'open', path: join(dir, 'f'), flags: 'r' },
      { op: 'mkdir', path: dir },
      { op: 'mkdir', path: join(dir, 'never') },
    ]).catch((e: unknown) => e)
    expect(isSandboxError(err, 'S313')).toBe(true)
    expect((err as Error).message).toContain(`${dir}: fsBatch mkdir`)
    expect((err as { details: Record<string, unknown> }).details).toMatchObject({ errnoName: 'EEXIST', syscall: 'mkdir', path: dir })
    expect(existsSync(join(dir, 'never'))).toBe(false)
    expect(openFds()).toEqual(before)
  })

  it('never writes or opens through a link at the last component', async () => {
    const target = join(tmp.dir, 'target')
    writeFileSync(target, 'kept')
    const link = join(tmp.dir, 'link')
    symlinkSync(target, link)
    for (const op of [{ op: 'write', path: link, data: 'x' }, { op: 'open', path: link, flags: 'r' }] as const) {
      const err = await fsBatch([op]).catch((e: unknown) => e)
      expect((err as { details: Record<string, unknown> }).details).toMatchObject({ errnoName: 'ELOOP', path: link })
    }
    expect(readFileSync(target, 'utf8')).toBe('kept')
  })

  // A cgroup of the pids controller with a sleeping child in it: removeCgroup kills it and
  // removes the directory once the child has left (rmdir is EBUSY until then).
  const pids = probe().cgroup.controllers.pids
  it.runIf(process.getuid?.() === 0 && pids != null && pids.writable)('removeCgroup kills what the group holds and removes it; a group already gone is no error', async () => {
    const dir = join(pids!.path, `krunbox-fs-batch-${process.pid}`)
    mkdirSync(dir)
    const child = spawn({ file: 'sleep', args: ['30'], cgroupJoinFiles: [join(dir, 'cgroup.procs')] })
    const exited = waitForExit(child.pid)
    await fsBatch([{ op: 'removeCgroup', path: dir }])
    expect(await exited).toEqual({ exitCode: null, signal: 'SIGKILL' })
    expect(existsSync(dir)).toBe(false)
    await fsBatch([{ op: 'removeCgroup', path: dir }])
  })

  it('removeTree removes a directory and all under it, never through a link; a tree already gone is no error', async () => {
    const outside = join(tmp.dir, 'outside')
    mkdirSync(outside)
    writeFileSync(join(outside, 'kept'), 'kept')
    const tree = join(tmp.dir, 'tree')
    mkdirSync(join(tree, 'ctl', 'deep'), { recursive: true })
    writeFileSync(join(tree, 'state.json'), '{}')
    writeFileSync(join(tree, 'ctl', 'deep', 'f'), 'x')
    symlinkSync(outside, join(tree, 'ctl', 'planted'))
    await fsBatch([{ op: 'removeTree', path: tree }])
    expect(existsSync(tree)).toBe(false)
    expect(readFileSync(join(outside, 'kept'), 'utf8')).toBe('kept')
    await fsBatch([{ op: 'removeTree', path: tree }])
    // A link given as the tree itself is not followed either.
    symlinkSync(outside, tree)
    await fsBatch([{ op: 'removeTree', path: tree }])
    expect(readFileSync(join(outside, 'kept'), 'utf8')).toBe('kept')
  })

  it('listen makes a listening socket owned as asked, which queues a connection nobody accepts yet; never over an existing file', async () => {
    const sock = join(tmp.dir, 'agent.sock')
    const [fd] = await fsBatch([{ op: 'listen', path: sock, uid: 4321, gid: 4322 }])
    expect(statSync(sock).isSocket()).toBe(true)
    expect([statSync(sock).uid, statSync(sock).gid, statSync(sock).mode & 0o777]).toEqual([4321, 4322, 0o600])
    // Connected and written to before anyone accepts: the kernel queues both.
    const client = net.createConnection(sock)
    await new Promise<void>((resolve, reject) => client.once('connect', resolve).once('error', reject))
    client.end('queued')
    const server = net.createServer()
    const accepted = new Promise<net.Socket>((resolve) => server.once('connection', resolve))
    server.listen({ fd }) // the server owns the fd from here
    const got = await new Promise<string>((resolve) => {
      void accepted.then((socket) => {
        let text = ''
        socket.on('data', (b) => (text += b)).on('end', () => resolve(text))
      })
    })
    expect(got).toBe('queued')
    await new Promise((resolve) => server.close(resolve))
    // An existing file stays as it was, and the failure names the call.
    const err = await fsBatch([{ op: 'listen', path: sock }]).catch((e: unknown) => e)
    expect((err as Error).message).toContain(`${sock}: fsBatch bind`)
    writeFileSync(join(tmp.dir, 'plain'), 'kept')
    await fsBatch([{ op: 'listen', path: join(tmp.dir, 'plain') }]).catch(() => {})
    expect(readFileSync(join(tmp.dir, 'plain'), 'utf8')).toBe('kept')
  })

  it('rejects bad input with S001 naming the value, before anything runs', async () => {
    const made = join(tmp.dir, 'not-made')
    const bad = async (ops: unknown, text: string) => {
      const err = await fsBatch(ops as never).catch((e: unknown) => e)
      expect(isSandboxError(err, 'S001')).toBe(true)
      expect((err as Error).message).toContain(text)
    }
    await bad('nope', 'expected an array of ops, got')
    await bad([{ op: 'mkdir', path: made }, { op: 'rename', path: '/x' }], 'ops[1].op must be "mkdir", "write", "open", "listen", "removeCgroup" or "removeTree", got "rename"')
    await bad([{ op: 'listen', path: '/x', uid: -1 }], 'ops[0].uid is out of range: number -1')
    await bad([{ op: 'listen', path: '/x', gid: 1.5 }], 'ops[0].gid is out of range: number 1.5')
    await bad([{ op: 'mkdir', path: 'relative' }], 'ops[0].path must be absolute, got "relative"')
    await bad([{ op: 'open', path: '/x', flags: 'a' }], 'ops[0].flags must be "r" or "w", got "a"')
    await bad([{ op: 'write', path: '/x', data: 7 }], 'ops[0].data must be a string')
    await bad([{ op: 'mkdir', path: '/x', mode: 0o10000 }], 'ops[0].mode is out of range')
    expect(existsSync(made)).toBe(false)
  })
})
