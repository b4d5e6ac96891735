import { execFileSync, spawnSync } from 'node:child_process'
import { chmodSync, closeSync, mkdirSync, readdirSync, readFileSync, rmdirSync, statSync, symlinkSync, writeFileSync } from 'node:fs'
import { open as openFile } from 'node:fs/promises'
import net from 'node:net'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

import { isSandboxError, SandboxError } from '../../lib/errors.js'
import { kill, killGroup, pipe, probe, spawn, spawnAsync, waitForExit, watchExit, type SpawnOptions } from '../../lib/native.js'
import { ensureNativeBuilt, fdsFromLsOutput, fdWithContent, makeTempDir, processState, statFields, until } from './helpers.js'

const fixtures = join(import.meta.dirname, 'fixtures')
let tmp: { dir: string; cleanup: () => void }

beforeAll(() => {
  ensureNativeBuilt()
  tmp = makeTempDir('krunbox-spawn-')
})
afterAll(() => tmp.cleanup())

function readAll(fd: number): Promise<string> {
  const socket = new net.Socket({ fd, readable: true, writable: false })
  let text = ''
  socket.setEncoding('utf8')
  socket.on('data', (chunk: string) => (text += chunk))
  return new Promise((resolve, reject) => {
    socket.on('end', () => resolve(text))
    socket.on('error', reject)
  })
}

/** Runs a command to completion, returning its stdout and exit status. */
async function run(options: SpawnOptions): Promise<{ stdout: string; exitCode: number | null; signal: string | null }> {
  const child = spawn({ ...options, createPipes: { stdout: true } })
  const [stdout, status] = await Promise.all([readAll(child.stdoutFd!), waitForExit(child.pid)])
  return { stdout, ...status }
}

function catchError(fn: () => unknown): SandboxError {
  try {
    fn()
  } catch (err) {
    if (err instanceof SandboxError) return err
    throw err
  }
  throw new Error('expected a SandboxError')
}

describe('spawn() and watchExit()', () => {
  it('reports an exit code and a terminating signal separately', async () => {
    const exited = spawn({ file: 'sh', args: ['-c', 'exit 3'] })
    expect(await waitForExit(exited.pid)).toEqual({ exitCode: 3, signal: null })

    const killed = spawn({ file: 'sh', args: ['-c', 'kill -9 $$'] })
    expect(await waitForExit(killed.pid)).toEqual({ exitCode: null, signal: 'SIGKILL' })
  })

  it('puts the child in its own process group, or its own session', async () => {
    const group = await run({ file: 'cat', args: ['/proc/self/stat'] })
    const [, , pgrp, session] = statFields(group.stdout)
    const pid = Number(group.stdout.split(' ')[0])
    expect(Number(pgrp)).toBe(pid)
    expect(Number(session)).not.toBe(pid)

    const leader = await run({ file: 'cat', args: ['/proc/self/stat'], newSession: true })
    const leaderPid = Number(leader.stdout.split(' ')[0])
    expect(statFields(leader.stdout).slice(2, 4).map(Number)).toEqual([leaderPid, leaderPid])
  })

  it('passes argv, env and cwd, and looks the program up in the PATH of env', async () => {
    const out = await run({
      file: 'sh',
      args: ['-c', 'printf "%s|%s|%s|%s" "$0" "$1" "$GREETING" "$(pwd)"', 'zero', 'one two'],
      env: ['GREETING=hi there', 'PATH=/usr/bin:/bin'],
      cwd: tmp.dir,
    })
    expect(out.stdout).toBe(`zero|one two|hi there|${tmp.dir}`)
    expect(out.exitCode).toBe(0)
  })

  it('starts the child with default signal dispositions and an empty signal mask', async () => {
    // Node itself ignores SIGPIPE and SIGXFSZ; the child must not inherit that.
    expect(readFileSync('/proc/self/status', 'utf8')).toMatch(/SigIgn:\s+0*1001000/)
    const status = (await run({ file: 'cat', args: ['/proc/self/status'] })).stdout
    expect(status).toMatch(/SigIgn:\s+0{16}\n/)
    expect(status).toMatch(/SigBlk:\s+0{16}\n/)
  })

  it('leaks no descriptor into the child beyond stdio and extraFds', async () => {
    const extra = fdWithContent(tmp.dir, 'extra.txt', 'x')
    try {
      const plain = await run({ file: 'ls', args: ['-l', '/proc/self/fd'] })
      expect(fdsFromLsOutput(plain.stdout)).toEqual([0, 1, 2])
      const withExtras = await run({ file: 'ls', args: ['-l', '/proc/self/fd'], extraFds: [extra, extra] })
      expect(fdsFromLsOutput(withExtras.stdout)).toEqual([0, 1, 2, 3, 4])
    } finally {
      closeSync(extra)
    }
  })

  it('does not leak a descriptor that lacks close-on-exec', () => {
    const leaky = join(tmp.dir, 'leaky_fd.so')
    execFileSync('cc', ['-shared', '-fPIC', '-o', leaky, join(fixtures, 'leaky_fd.c')])
    const out = spawnSync(process.execPath, [join(fixtures, 'list-fds-from-child.cjs'), leaky], { encoding: 'utf8', timeout: 20_000 })
    const report = JSON.parse(out.stdout) as { fd99Inheritable: boolean; listing: string; exitCode: number }
    expect(report.fd99Inheritable).toBe(true)
    expect(report.exitCode).toBe(0)
    expect(fdsFromLsOutput(report.listing)).toEqual([0, 1, 2])
  })

  it('maps extraFds to 3..n in order, even when they are given out of order', async () => {
    const a = fdWithContent(tmp.dir, 'a.txt', 'A')
    const b = fdWithContent(tmp.dir, 'b.txt', 'B')
    const c = fdWithContent(tmp.dir, 'c.txt', 'C')
    try {
      const out = await run({ file: 'sh', args: ['-c', 'cat <&3; cat <&4; cat <&5'], extraFds: [c, a, b] })
      expect(out.stdout).toBe('CAB')
    } finally {
      for (const fd of [a, b, c]) closeSync(fd)
    }
  })

  it('creates stdin/stdout/stderr pipes that work as net.Socket streams', async () => {
    const child = spawn({ file: 'sh', args: ['-c', 'cat; echo oops >&2'], createPipes: { stdin: true, stdout: true, stderr: true } })
    const stdout = readAll(child.stdoutFd!)
    const stderr = readAll(child.stderrFd!)
    const stdin = new net.Socket({ fd: child.stdinFd!, readable: false, writable: true })
    stdin.end('through cat\n')
    expect(await stdout).toBe('through cat\n')
    expect(await stderr).toBe('oops\n')
    expect(await waitForExit(child.pid)).toEqual({ exitCode: 0, signal: null })
  })

  it('hands out pipe() ends that a child can use as extraFds', async () => {
    const { readFd, writeFd } = pipe()
    const child = spawn({ file: 'sh', args: ['-c', 'echo via-fd-3 >&3'], extraFds: [writeFd] })
    closeSync(writeFd)
    expect(await readAll(readFd)).toBe('via-fd-3\n')
    expect((await waitForExit(child.pid)).exitCode).toBe(0)
  })

  it('reports exec failures synchronously as S304 with errno', () => {
    const missing = catchError(() => spawn({ file: '/nonexistent/program' }))
    expect(missing.code).toBe('S304')
    expect(missing.details).toMatchObject({ errno: 2, errnoName: 'ENOENT', syscall: 'execve', path: '/nonexistent/program' })

    const notInPath = catchError(() => spawn({ file: 'krunbox-no-such-program', env: ['PATH=/usr/bin:/bin'] }))
    expect(notInPath.details).toMatchObject({ errnoName: 'ENOENT', syscall: 'execve' })

    const script = join(tmp.dir, 'not-executable.sh')
    writeFileSync(script, '#!/bin/sh\n')
    chmodSync(script, 0o644)
    const denied = catchError(() => spawn({ file: script }))
    // root bypasses file permissions, but not a missing execute bit
    expect(denied.details).toMatchObject({ errno: 13, errnoName: 'EACCES', syscall: 'execve' })

    const badCwd = catchError(() => spawn({ file: 'true', cwd: join(tmp.dir, 'missing') }))
    expect(badCwd.details).toMatchObject({ errnoName: 'ENOENT', syscall: 'chdir', path: join(tmp.dir, 'missing') })
  })

  it('rejects bad options with S001 naming the value', () => {
    expect(catchError(() => spawn({ file: 'true', args: ['ok', 7 as unknown as string] })).message).toContain('options.args[1] must be a string, got number 7')
    expect(catchError(() => spawn({ file: 'true', env: ['NOEQUALS'] })).message).toContain('options.env[0] must look like KEY=VALUE')
    expect(catchError(() => spawn({ file: 'true', extraFds: [987654] })).message).toContain('extraFds[0] = 987654 is not an open file descriptor')
    expect(catchError(() => spawn({ file: 'true', stdio: [null, 1, null], createPipes: { stdout: true } })).code).toBe('S001')
    expect(catchError(() => spawn({ file: 'true', parentDeathSignal: 'SIGNOPE' as NodeJS.Signals })).message).toContain('"SIGNOPE"')
    expect(catchError(() => spawn({ file: 'a\0b' })).code).toBe('S001')
  })

  it('kills a child whose parent exits when parentDeathSignal is set, and not otherwise', async () => {
    const orphan = (parentDeathSignal?: number): number => {
      const spec = JSON.stringify({ file: 'sleep', args: ['30'], parentDeathSignal })
      return Number(execFileSync(process.execPath, [join(fixtures, 'orphan-parent.cjs'), spec], { encoding: 'utf8', timeout: 20_000 }))
    }
    const dead = (pid: number) => {
      const state = processState(pid)
      return state === null || state === 'Z'
    }
    const guarded = orphan(9)
    expect(await until(() => dead(guarded), 5000)).toBe(true)

    const unguarded = orphan()
    try {
      await new Promise((r) => setTimeout(r, 300))
      expect(dead(unguarded)).toBe(false)
    } finally {
      process.kill(unguarded, 'SIGKILL')
    }
  })

  const asRoot = process.getuid?.() === 0
  it.skipIf(!asRoot)('pidNamespace: the child is PID 1 of a namespace whose end kills what it left in another session; a parentDeathSignal still reaches it', async () => {
    expect((await run({ file: 'sh', args: ['-c', 'echo $$'], pidNamespace: true })).stdout).toBe('1\n')
    // A grandchild in a session of its own: neither killGroup nor the child's end reaches it, only the namespace's.
    const leaver = (pidNamespace: boolean) => {
      const child = spawn({ file: 'sh', args: ['-c', 'setsid sleep 600 & exec sleep 600'], newSession: true, pidNamespace })
      return child.pid
    }
    const children = (pid: number) => readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(' ').filter(Boolean).map(Number)
    const dead = (pid: number) => [null, 'Z'].includes(processState(pid))
    for (const pidNamespace of [true, false]) {
      const pid = leaver(pidNamespace)
      expect(await until(() => children(pid).length === 1, 5000)).toBe(true)
      const [left] = children(pid)
      const exit = waitForExit(pid)
      kill(pid, 'SIGKILL')
      await exit
      try {
        if (pidNamespace) expect(await until(() => dead(left), 5000)).toBe(true)
        else expect(dead(left)).toBe(false)
      } finally {
        if (!dead(left)) process.kill(left, 'SIGKILL')
      }
    }
    const spec = JSON.stringify({ file: 'sleep', args: ['30'], parentDeathSignal: 9, pidNamespace: true })
    const guarded = Number(execFileSync(process.execPath, [join(fixtures, 'orphan-parent.cjs'), spec], { encoding: 'utf8', timeout: 20_000 }))
    expect(await until(() => dead(guarded), 5000)).toBe(true)
  })

  it("stderrFile: the child's stderr is appended to it, created 0600, never through a link; not beside stdio[2]", async () => {
    const file = join(tmp.dir, 'stderr-file.log')
    for (const word of ['first', 'second']) {
      const child = spawn({ file: 'sh', args: ['-c', `echo ${word} >&2`], stderrFile: file })
      expect(await waitForExit(child.pid)).toEqual({ exitCode: 0, signal: null })
    }
    expect(readFileSync(file, 'utf8')).toBe('first\nsecond\n')
    expect(statSync(file).mode & 0o777).toBe(0o600)
    const link = join(tmp.dir, 'stderr-link.log')
    symlinkSync(file, link)
    expect(catchError(() => spawn({ file: 'true', stderrFile: link })).details).toMatchObject({ errnoName: 'ELOOP', path: link })
    expect(catchError(() => spawn({ file: 'true', stderrFile: 'relative.log' })).message).toContain('stderrFile must be an absolute path, got "relative.log"')
    expect(catchError(() => spawn({ file: 'true', stderrFile: file, stdio: [null, null, 2] })).code).toBe('S001')
  })

  it('does not keep the event loop alive unless asked to', () => {
    const fixture = join(fixtures, 'event-loop-exit.cjs')
    const started = Date.now()
    const unref = spawnSync(process.execPath, [fixture, 'unref', '5'], { encoding: 'utf8', timeout: 20_000 })
    expect(unref.status).toBe(0)
    expect(unref.stdout).toBe('')
    expect(Date.now() - started).toBeLessThan(4000)

    const ref = spawnSync(process.execPath, [fixture, 'ref', '0.2'], { encoding: 'utf8', timeout: 20_000 })
    expect(JSON.parse(ref.stdout)).toEqual({ exitCode: 0, signal: null })

    // Every watch shares one handle: the ref'd one alone holds the loop, until it is reported.
    const mixedStart = Date.now()
    const mixed = spawnSync(process.execPath, [fixture, 'mixed', '0.3'], { encoding: 'utf8', timeout: 20_000 })
    expect(mixed.status).toBe(0)
    expect(JSON.parse(mixed.stdout)).toEqual({ exitCode: 0, signal: null })
    expect(Date.now() - mixedStart).toBeLessThan(10_000)
  })

  it('survives a worker environment torn down while its child still runs', () => {
    const out = spawnSync(process.execPath, [join(fixtures, 'worker-teardown.cjs')], { encoding: 'utf8', timeout: 20_000 })
    expect(out.signal).toBeNull()
    expect(out.status).toBe(0)
    const report = JSON.parse(out.stdout) as { childPid: number; childStateAfter: string | null }
    expect(report.childPid).toBeGreaterThan(0)
    // the waiter thread still reaped the child: no zombie left behind
    expect(report.childStateAfter).toBeNull()
  })

  it('allows one watcher per child and only children of spawn()', async () => {
    const child = spawn({ file: 'sleep', args: ['5'] })
    const exit = waitForExit(child.pid)
    expect(catchError(() => watchExit(child.pid, () => {})).message).toContain('already watched')
    expect(catchError(() => watchExit(1, () => {})).message).toContain('pid 1 is not a running child started by spawn()')
    kill(child.pid, 'SIGTERM')
    expect(await exit).toEqual({ exitCode: null, signal: 'SIGTERM' })
  })
})

describe('kill() and killGroup()', () => {
  it('signals a child and returns false once it has exited (never a recycled pid)', async () => {
    const child = spawn({ file: 'sleep', args: ['5'] })
    const exit = waitForExit(child.pid)
    expect(kill(child.pid, 0)).toBe(true)
    expect(kill(child.pid, 'SIGUSR1')).toBe(true)
    expect(await exit).toEqual({ exitCode: null, signal: 'SIGUSR1' })
    expect(kill(child.pid, 'SIGKILL')).toBe(false)
  })

  it('signals the whole process group', async () => {
    const child = spawn({ file: 'sh', args: ['-c', 'sleep 30 & sleep 30 & echo ready; wait'], createPipes: { stdout: true } })
    const exit = waitForExit(child.pid)
    const socket = new net.Socket({ fd: child.stdoutFd!, readable: true, writable: false })
    await new Promise((r) => socket.once('data', r))
    const members = () =>
      execFileSync('ps', ['-e', '-o', 'pid=,pgid=,stat='], { encoding: 'utf8' })
        .split('\n')
        .map((l) => l.trim().split(/\s+/))
        .filter(([, pgid, stat]) => Number(pgid) === child.pid && !stat?.startsWith('Z'))
    expect(members().length).toBe(3)
    expect(killGroup(child.pid, 'SIGKILL')).toBe(true)
    expect(await exit).toEqual({ exitCode: null, signal: 'SIGKILL' })
    expect(await until(() => members().length === 0, 5000)).toBe(true)
    socket.destroy()
  })

  it('returns false for a group that does not exist', () => {
    // pids are at most 4194304 (pid_max ceiling), so this group cannot exist
    expect(killGroup(4194305, 'SIGTERM')).toBe(false)
  })

  it('refuses pids and groups that would hit more than intended', () => {
    const ownGroup = Number(statFields(readFileSync('/proc/self/stat', 'utf8'))[2])
    for (const [fn, message] of [
      [() => kill(0), 'kill: pid must be an integer in 1..'],
      [() => kill(-5), 'kill: pid must be an integer in 1..'],
      [() => killGroup(1), 'killGroup: pgid must be an integer in 2..'],
      [() => killGroup(ownGroup), "is this process's own group"],
      [() => kill(1, 'SIGBOGUS' as NodeJS.Signals), "signal name like 'SIGTERM'"],
    ] as const) {
      const err = catchError(fn)
      expect(isSandboxError(err, 'S001')).toBe(true)
      expect(err.message).toContain(message)
    }
  })
})

describe('cgroupJoinFiles', () => {
  // probe() needs the addon, which beforeAll may only now be building.
  ensureNativeBuilt()
  const pids = probe().cgroup.controllers.pids
  const usable = process.getuid?.() === 0 && pids != null && pids.writable
  // A v1 `tasks` file moves one thread; the child has only one, so all of it joins.
  it.runIf(usable)('starts the child inside the given cgroup, through cgroup.procs or a v1 tasks file', async () => {
    const procsDir = join(pids!.path, `krunbox-test-${process.pid}`)
    mkdirSync(procsDir)
    try {
      for (const file of pids!.version === 1 ? ['cgroup.procs', 'tasks'] : ['cgroup.procs']) {
        const out = await run({ file: 'cat', args: ['/proc/self/cgroup'], cgroupJoinFiles: [join(procsDir, file)] })
        const relative = procsDir.slice(pids!.path.length)
        const line = out.stdout.split('\n').find((l) => (pids!.version === 1 ? /:pids:/.test(l) : l.startsWith('0::')))
        expect(line?.endsWith(relative), file).toBe(true)
      }
    } finally {
      rmdirSync(procsDir)
    }
  })

  it('reports a cgroup it cannot join as S304 naming the file', () => {
    const err = catchError(() => spawn({ file: 'true', cgroupJoinFiles: ['/nonexistent-cgroup/cgroup.procs'] }))
    expect(err.code).toBe('S304')
    expect(err.details).toMatchObject({ errnoName: 'ENOENT', syscall: 'write', path: '/nonexistent-cgroup/cgroup.procs' })
  })
})

describe('exit watching', () => {
  it('waits for every child from one thread: 20 watched children add no thread each', async () => {
    const threads = () => Number(/Threads:\s+(\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))![1])
    const warm = spawn({ file: 'true' })
    await waitForExit(warm.pid) // the poller thread exists from here on
    const before = threads()
    const children = Array.from({ length: 20 }, () => spawn({ file: 'sleep', args: ['30'] }))
    const exits = children.map((c) => waitForExit(c.pid))
    // A thread per child would add 20; a little slack for threads the runtime starts on its own.
    expect(threads() - before).toBeLessThan(5)
    for (const c of children) kill(c.pid, 'SIGKILL')
    for (const e of await Promise.all(exits)) expect(e).toEqual({ exitCode: null, signal: 'SIGKILL' })
  })
})

describe('spawnAsync()', () => {
  it('launches off the event loop: the promise waits for a child blocked before exec while JS keeps running', async () => {
    // The child's first act is writing its pid to its "cgroup" file; a FIFO blocks it there until
    // this thread opens the other end. A launch on the main thread would never get that far.
    const fifo = join(tmp.dir, 'blocking-cgroup-procs')
    execFileSync('mkfifo', [fifo])
    const launched = spawnAsync({ file: 'sh', args: ['-c', 'exit 7'], cgroupJoinFiles: [fifo] })
    const reader = await openFile(fifo, 'r')
    const { bytesRead, buffer } = await reader.read(Buffer.alloc(32), 0, 32)
    await reader.close()
    const child = await launched
    expect(buffer.subarray(0, bytesRead).toString()).toBe('0\n') // "0": the writer itself
    expect(await waitForExit(child.pid)).toEqual({ exitCode: 7, signal: null })
  })

  it('gives pipes like spawn() and rejects with the same codes', async () => {
    const child = await spawnAsync({ file: 'sh', args: ['-c', 'echo async'], createPipes: { stdout: true } })
    const [stdout, status] = await Promise.all([readAll(child.stdoutFd!), waitForExit(child.pid)])
    expect({ stdout, ...status }).toEqual({ stdout: 'async\n', exitCode: 0, signal: null })
    const missing = await spawnAsync({ file: '/nonexistent/program' }).catch((e: unknown) => e)
    expect(missing).toBeInstanceOf(SandboxError)
    expect(missing).toMatchObject({ code: 'S304', details: { errnoName: 'ENOENT', syscall: 'execve', path: '/nonexistent/program' } })
    const bad = await spawnAsync({ file: 'true', extraFds: [987654] }).catch((e: unknown) => e)
    expect(bad).toMatchObject({ code: 'S001' })
    expect((bad as Error).message).toContain('extraFds[0] = 987654 is not an open file descriptor')
  })
})

describe('userNamespace and stagedBinds', () => {
  const asRoot = process.getuid?.() === 0
  const map = '0 1000000000 65536\n'

  it.skipIf(!asRoot)('runs the child as root of a new user namespace with the given maps, after it joined its cgroups', async () => {
    const out = await run({
      file: 'sh',
      args: ['-c', 'cat /proc/self/uid_map /proc/self/gid_map; id -u; id -g; grep -E "^(Uid|Gid|Groups|CapEff):" /proc/self/status'],
      userNamespace: { uidMap: map, gidMap: map },
    })
    expect(out.exitCode).toBe(0)
    const lines = out.stdout.trim().split('\n').map((l) => l.trim().split(/\s+/))
    expect(lines[0]).toEqual(['0', '1000000000', '65536'])
    expect(lines[1]).toEqual(['0', '1000000000', '65536'])
    expect(lines[2]).toEqual(['0'])
    expect(lines[3]).toEqual(['0'])
    expect(lines[4]).toEqual(['Uid:', '0', '0', '0', '0'])
    expect(lines[6]).toEqual(['Groups:'])
    expect(lines[7][1]).not.toMatch(/^0+$/) // full capabilities, but only inside its namespace
  })

  it.skipIf(!asRoot)('is seen from the host under the mapped unprivileged ids, and still dies with its parent', async () => {
    const child = spawn({ file: 'sleep', args: ['30'], userNamespace: { uidMap: map, gidMap: map }, parentDeathSignal: 'SIGKILL' })
    const exit = waitForExit(child.pid)
    const status = readFileSync(`/proc/${child.pid}/status`, 'utf8')
    expect(status).toMatch(/^Uid:\s+1000000000\s+1000000000\s+1000000000\s+1000000000$/m)
    expect(status).toMatch(/^Gid:\s+1000000000\s/m)
    // The death signal is set after the ids change (a change clears it): it must be in place.
    expect(readFileSync(`/proc/${child.pid}/stat`, 'utf8')).toBeTruthy()
    kill(child.pid, 'SIGKILL')
    expect(await exit).toEqual({ exitCode: null, signal: 'SIGKILL' })
  })

  it('answers a map the kernel refuses with S304 naming the map file, and leaves no child', () => {
    const err = catchError(() => spawn({ file: 'true', userNamespace: { uidMap: '0 0 4294967295 nonsense\n', gidMap: map } }))
    expect(err.code).toBe('S304')
    expect(err.message).toContain('uid_map')
  })

  it.skipIf(!asRoot)('binds sources into a private tmpfs that the namespace ids can reach through a 0700 directory', async () => {
    const hidden = join(tmp.dir, 'hidden')
    mkdirSync(join(hidden, 'dir'), { recursive: true })
    chmodSync(hidden, 0o700)
    writeFileSync(join(hidden, 'dir', 'f'), 'in dir\n')
    writeFileSync(join(hidden, 'file'), 'a file\n')
    const out = await run({
      file: 'sh',
      args: ['-c', 'cat /tmp/0/f /tmp/1; ls /tmp'],
      stagedBinds: { dir: '/tmp', sources: [join(hidden, 'dir'), join(hidden, 'file')] },
      userNamespace: { uidMap: map, gidMap: map },
    })
    expect(out).toMatchObject({ exitCode: 0, stdout: 'in dir\na file\n0\n1\n' })
    // Private: the host's /tmp saw nothing of it.
    expect(readFileSync('/proc/self/mountinfo', 'utf8')).not.toMatch(/ \/tmp\/0 /)
  })

  it.skipIf(!asRoot)('boundingCapabilities leaves only the listed capabilities in the bounding set of what the child execs', async () => {
    const bounding = async (caps?: number[]) => {
      const out = await run({ file: 'sh', args: ['-c', 'grep -E "^Cap(Bnd|Eff):" /proc/self/status'], userNamespace: { uidMap: map, gidMap: map }, boundingCapabilities: caps })
      return Object.fromEntries(out.stdout.trim().split('\n').map((l) => l.split(/:\s+/)))
    }
    // CAP_CHOWN (0) and CAP_SYS_ADMIN (21): 0x200001, and root's effective set is no larger.
    expect(await bounding([0, 21])).toEqual({ CapBnd: '0000000000200001', CapEff: '0000000000200001' })
    expect(await bounding([])).toEqual({ CapBnd: '0000000000000000', CapEff: '0000000000000000' })
    expect(BigInt(`0x${(await bounding()).CapBnd}`)).toBeGreaterThan(0x200001n) // unlimited without the option
  })

  /** A stand-in for newuidmap/newgidmap: logs its argv, then writes the map from its numbers (or fails). */
  function mapHelper(name: string, body = 'printf "%s %s %s\\n" "$@" > "/proc/$pid/$file"'): string {
    const file = join(tmp.dir, name)
    writeFileSync(file, `#!/bin/sh\npid=$1; shift\nfile=${name.startsWith('newuid') ? 'uid_map' : 'gid_map'}\necho "$pid $*" >> ${join(tmp.dir, 'helpers.log')}\n${body}\n`, { mode: 0o755 })
    return file
  }

  /** Pids of this process's children (of every thread): one left behind would show here. */
  function children(): Set<number> {
    const out = new Set<number>()
    for (const task of readdirSync('/proc/self/task')) {
      for (const pid of readFileSync(`/proc/self/task/${task}/children`, 'utf8').trim().split(/\s+/)) if (pid) out.add(Number(pid))
    }
    return out
  }

  it.skipIf(!asRoot)('has the maps written by the given helpers, run as <helper> <pid> <numbers>, off the event loop', async () => {
    const helpers = { uid: mapHelper('newuidmap-ok'), gid: mapHelper('newgidmap-ok') }
    const twoLines = '0 1000000000 1\n1 1000000001 65535\n'
    const child = await spawnAsync({ file: 'cat', args: ['/proc/self/uid_map', '/proc/self/gid_map'], userNamespace: { uidMap: twoLines, gidMap: twoLines, helpers }, createPipes: { stdout: true } })
    const [out] = await Promise.all([readAll(child.stdoutFd!), waitForExit(child.pid)])
    expect(out.trim().split('\n').map((l) => l.trim().split(/\s+/).join(' '))).toEqual(['0 1000000000 1', '1 1000000001 65535', '0 1000000000 1', '1 1000000001 65535'])
    expect(readFileSync(join(tmp.dir, 'helpers.log'), 'utf8')).toBe(`${child.pid} 0 1000000000 1 1 1000000001 65535\n`.repeat(2))
  })

  it('answers a helper that fails with S304 naming the command, its status and its stderr, and leaves no process', async () => {
    const failing = mapHelper('newuidmap-refuses', 'echo "newuidmap: uid range [1-2) -> [5-6) not allowed" >&2; exit 1')
    const before = children()
    const err = await spawnAsync({ file: 'sleep', args: ['30'], userNamespace: { uidMap: '0 0 1\n1 5 1\n', gidMap: map, helpers: { uid: failing, gid: failing } } }).catch((e) => e)
    expect(err).toMatchObject({ code: 'S304', details: { path: failing } })
    expect(err.message).toMatch(/uid_map with .*newuidmap-refuses \d+ 0 0 1 1 5 1 exited with status 1: newuidmap: uid range \[1-2\) -> \[5-6\) not allowed$/)
    expect([...children()].filter((pid) => !before.has(pid))).toEqual([])
  })

  it('answers a helper that cannot run with S304 and its errno, and rejects a relative helper path with S001', async () => {
    const err = await spawnAsync({ file: 'true', userNamespace: { uidMap: map, gidMap: map, helpers: { uid: '/nonexistent/newuidmap', gid: '/nonexistent/newgidmap' } } }).catch((e) => e)
    expect(err).toMatchObject({ code: 'S304', details: { errnoName: 'ENOENT', syscall: 'posix_spawn', path: '/nonexistent/newuidmap' } })
    const relative = catchError(() => spawn({ file: 'true', userNamespace: { uidMap: map, gidMap: map, helpers: { uid: 'newuidmap', gid: '/usr/bin/newgidmap' } } }))
    expect(relative).toMatchObject({ code: 'S001', message: expect.stringContaining('"newuidmap"') })
  })

  it('rejects bad userNamespace and stagedBinds options with S001 or S304 naming the value', () => {
    expect(catchError(() => spawn({ file: 'true', boundingCapabilities: [0] })).message).toContain('needs options.userNamespace')
    expect(catchError(() => spawn({ file: 'true', userNamespace: { uidMap: map, gidMap: map }, boundingCapabilities: [64] })).message).toContain('boundingCapabilities[0]')
    expect(catchError(() => spawn({ file: 'true', userNamespace: { uidMap: map, gidMap: map }, boundingCapabilities: 'CAP_CHOWN' as never })).code).toBe('S001')
    expect(catchError(() => spawn({ file: 'true', userNamespace: 'x' as never })).message).toContain('userNamespace')
    expect(catchError(() => spawn({ file: 'true', userNamespace: { uidMap: '', gidMap: map } })).code).toBe('S001')
    expect(catchError(() => spawn({ file: 'true', stagedBinds: { dir: 'tmp', sources: [] } })).message).toContain('"tmp"')
    const missing = catchError(() => spawn({ file: 'true', stagedBinds: { dir: '/tmp', sources: ['/nonexistent/x'] } }))
    expect(missing.code).toBe('S304')
    expect(missing.message).toContain('/nonexistent/x')
  })
})
