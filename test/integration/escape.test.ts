/**
 * Escapes from a default `base` sandbox on the namespace driver. Every case is an
 * attempt that must fail; none may leave a trace on the host (a marker file, the image, the
 * state directory) and no host sysctl may change.
 * (Issue 20.)
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SANDBOX_ID_BASE } from '../../lib/drivers/idmap.js'
import { SandboxError } from '../../lib/errors.js'
import { runtimeState, type Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { PATHS_TOWARD_HOST_STATE, SHELL_ATTEMPTS } from '../helpers/escape-attempts.js'
import { testRuntime } from '../helpers/runtime.js'

// Host sysctls that change on their own (counters, entropy, last pid): left out of the comparison.
const VOLATILE_SYSCTLS = [
  /^kernel\/random\//,
  /^kernel\/ns_last_pid$/,
  /^kernel\/pty\/nr$/,
  /^kernel\/tainted$/,
  /^fs\/dentry-state$/,
  /^fs\/inode-nr$/,
  /^fs\/inode-state$/,
  /^fs\/file-nr$/,
  /^fs\/aio-nr$/,
  /^fs\/dquot-/,
  /^fs\/quota\//,
  /^fs\/binfmt_misc\//,
  /^net\/netfilter\/nf_conntrack_count$/,
  /^vm\/stat_refresh$/,
  /^net\/ipv4\/route\/flush$/,
  /^net\/ipv6\/route\/flush$/,
]

function readSysctls(): Map<string, string> {
  const out = new Map<string, string>()
  const walk = (dir: string) => {
    for (const e of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, e.name)
      const rel = path.relative('/proc/sys', p)
      if (VOLATILE_SYSCTLS.some((r) => r.test(rel))) continue
      if (e.isDirectory()) walk(p)
      else {
        try {
          out.set(rel, fs.readFileSync(p, 'utf8'))
        } catch {} // write-only or refused to read: nothing to compare
      }
    }
  }
  walk('/proc/sys')
  return out
}

// A static program making the syscalls no busybox applet makes; it prints name=errno per call.
const PROBE_SOURCE = `package main

import (
	"fmt"
	"syscall"
	"unsafe"
)

func try(name string, trap uintptr, a ...uintptr) {
	var args [6]uintptr
	copy(args[:], a)
	_, _, e := syscall.Syscall6(trap, args[0], args[1], args[2], args[3], args[4], args[5])
	fmt.Printf("%s=%d\\n", name, int(e))
}

func main() {
	buf := make([]byte, 256)
	p := uintptr(unsafe.Pointer(&buf[0]))
	try("kexec_load", syscall.SYS_KEXEC_LOAD, 0, 0, 0, 0)
	try("kexec_file_load", 320, 0, 0, 0, 0, 0)
	try("bpf", 321, 0, p, 48)
	try("perf_event_open", syscall.SYS_PERF_EVENT_OPEN, p, 0, ^uintptr(0), ^uintptr(0), 0)
	try("userfaultfd", 323, 0)
	try("keyctl", syscall.SYS_KEYCTL, 0, ^uintptr(0)-2, 0) // KEYCTL_GET_KEYRING_ID of the user keyring
	try("add_key", syscall.SYS_ADD_KEY, p, p, 0, 0, ^uintptr(0)-3)
	try("open_by_handle_at", 304, uintptr(^uint(99)), p, 0)
	try("init_module", syscall.SYS_INIT_MODULE, p, 0, p)
	try("unshare_user", syscall.SYS_UNSHARE, syscall.CLONE_NEWUSER)
	try("unshare_mount", syscall.SYS_UNSHARE, syscall.CLONE_NEWNS)
	try("clone_newuser", syscall.SYS_CLONE, syscall.CLONE_NEWUSER|uintptr(syscall.SIGCHLD), 0, 0, 0, 0)
	try("setns", 308, 0, 0)
	try("fsopen", 430, p, 0)
	try("open_tree", 428, ^uintptr(99), p, 0)
	try("ptrace_agent", syscall.SYS_PTRACE, syscall.PTRACE_ATTACH, 1, 0, 0)
	try("settimeofday", syscall.SYS_SETTIMEOFDAY, p, 0)
	try("reboot", syscall.SYS_REBOOT, 0xfee1dead, 672274793, 0x1234567, 0)
	try("swapoff", syscall.SYS_SWAPOFF, p)
	try("io_uring_setup", 425, 1, p)
}
`

let rt: Runtime
let sb: Sandbox
let tmp: string
let probeBinary: string
let sysctlsBefore: Map<string, string>

beforeAll(async () => {
  sysctlsBefore = readSysctls()
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-escape-'))
  fs.writeFileSync(path.join(tmp, 'main.go'), PROBE_SOURCE)
  fs.writeFileSync(path.join(tmp, 'go.mod'), 'module probe\n\ngo 1.19\n')
  probeBinary = path.join(tmp, 'probe')
  execFileSync('go', ['build', '-o', probeBinary, '.'], {
    cwd: tmp,
    env: { ...process.env, CGO_ENABLED: '0', GOARCH: 'amd64', GOFLAGS: '-mod=mod', GOCACHE: path.join(tmp, 'cache') },
  })
  rt = testRuntime()
  sb = await rt.create({ image: 'base', driver: 'namespace' })
}, 120_000)

afterAll(async () => {
  await rt?.close()
  fs.rmSync(tmp, { recursive: true, force: true })
})

let sbWithCaps: Sandbox | undefined

async function sh(script: string) {
  return sb.exec('sh', ['-c', script], { timeoutMs: 60_000 })
}

async function code(p: Promise<unknown>): Promise<string> {
  const err = await p.then(
    () => null,
    (e) => e,
  )
  expect(err).toBeInstanceOf(SandboxError)
  return (err as SandboxError).code
}

describe('the kernel surface', () => {
  for (const attempt of SHELL_ATTEMPTS) {
    it(`holds: ${attempt.name}`, async () => {
      const marker = path.join(tmp, 'marker')
      const r = await sb.exec('sh', ['-c', attempt.script], { timeoutMs: 60_000, env: { MARKER: marker } })
      expect([attempt.name, r.stdout, attempt.held(r.stdout)]).toEqual([attempt.name, r.stdout, true])
      expect(fs.existsSync(marker)).toBe(false)
    })
  }

  // Root given every capability create() allows holds the same line: they are its user namespace's.
  for (const attempt of SHELL_ATTEMPTS) {
    it(`holds with capabilities given to root: ${attempt.name}`, async () => {
      sbWithCaps ??= await rt.create({
        image: 'base',
        driver: 'namespace',
        capabilities: ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'SETUID', 'SETGID'],
      })
      const marker = path.join(tmp, 'marker-caps')
      const r = await sbWithCaps.exec('sh', ['-c', attempt.script], { timeoutMs: 60_000, env: { MARKER: marker } })
      expect([attempt.name, r.stdout, attempt.held(r.stdout)]).toEqual([attempt.name, r.stdout, true])
      expect(fs.existsSync(marker)).toBe(false)
    })
  }

  // The probe spells x86_64 syscall numbers; the agent's Go tests cover the filter on both architectures.
  it.skipIf(process.arch !== 'x64')(
    'refuses kexec, bpf, perf, userfaultfd, keyrings, modules, namespaces, the mount API, clocks, io_uring, ptrace of the agent',
    async () => {
      await sb.fs.upload(probeBinary, '/workspace/probe', { mode: 0o755 })
      const r = await sb.exec('/workspace/probe', [])
      expect(r.exitCode).toBe(0)
      const results = Object.fromEntries(
        r.stdout
          .trim()
          .split('\n')
          .map((l) => l.split('=')),
      )
      expect(Object.keys(results).length).toBe(20)
      for (const [name, errno] of Object.entries(results)) expect([name, errno]).toEqual([name, '1']) // EPERM
    },
  )

  it('writes to the image stay in the sandbox', async () => {
    const name = `escape-${process.pid}`
    const r = await sh(`echo x > /usr/${name} && echo pwned >> /etc/passwd && echo ok`)
    expect(r.stdout).toBe('ok\n')
    const image = await rt.images.resolve('base')
    expect(fs.existsSync(path.join(image.rootfs, 'usr', name))).toBe(false)
    expect(fs.readFileSync(path.join(image.rootfs, 'etc/passwd'), 'utf8')).not.toContain('pwned')
  })

  it('is root inside, and an unprivileged user to the host (on a root host: the sandbox id range)', async () => {
    const r = await sh('id -u; id -g; cat /proc/self/uid_map')
    const [uid, gid, ...map] = r.stdout.trim().split('\n')
    expect([uid, gid]).toEqual(['0', '0'])
    const hostUid = process.getuid!() === 0 ? SANDBOX_ID_BASE : process.getuid!()
    expect(map[0].trim().split(/\s+/).slice(0, 2)).toEqual(['0', String(hostUid)])
    const bwrapPid = runtimeState(rt).read(sb.id)!.pid
    const tree = execFileSync('ps', ['-o', 'uid=', '--ppid', String(bwrapPid), '-p', String(bwrapPid)], {
      encoding: 'utf8',
    })
    const uids = tree
      .trim()
      .split('\n')
      .map((l) => Number(l.trim()))
    expect(uids.length).toBeGreaterThanOrEqual(2)
    for (const u of uids) expect(u).toBe(hostUid)
  })
})

describe('the fs API never passes a symlink or a magic link', () => {
  it('cannot reach the control or state directory through /proc/1/fd, /proc/self/root, /proc/1/cwd or ..', async () => {
    const stateRoot = runtimeState(rt).root
    const listing = () => execFileSync('find', [stateRoot], { encoding: 'utf8' }).split('\n').sort().join('\n')
    const before = listing()
    for (const p of PATHS_TOWARD_HOST_STATE) {
      expect([p, await code(sb.fs.writeFile(p, 'forged'))]).toEqual([p, expect.stringMatching(/^S21[0-2]$/)])
      expect([p, await code(sb.fs.mkdir(p, { parents: true }))]).toEqual([p, expect.stringMatching(/^S21[0-2]$/)])
    }
    expect(listing()).toBe(before)
  })

  it('every op refuses a path through a planted symlink', async () => {
    await sh(
      'mkdir -p /workspace/real/d && echo secret > /workspace/real/f && echo secret > /workspace/real/d/g && ln -s /workspace/real /workspace/ln && ln -s /proc/1/fd /workspace/fdl',
    )
    const through = '/workspace/ln'
    const ops: Array<[string, () => Promise<unknown>]> = [
      ['readFile', () => sb.fs.readFile(`${through}/f`)],
      ['writeFile', () => sb.fs.writeFile(`${through}/new`, 'x')],
      ['mkdir', () => sb.fs.mkdir(`${through}/newdir`)],
      ['ls', () => sb.fs.ls(`${through}/d`)],
      ['stat', () => sb.fs.stat(`${through}/f`)],
      ['rm', () => sb.fs.rm(`${through}/f`)],
      ['rm -r', () => sb.fs.rm(`${through}/d`, { recursive: true })],
      ['chmod', () => sb.fs.chmod(`${through}/f`, { mode: 0o777 })],
      ['chmod -R', () => sb.fs.chmod(`${through}/d`, { mode: 0o777, recursive: true })],
      ['mv from', () => sb.fs.mv(`${through}/f`, '/workspace/moved')],
      ['mv to', () => sb.fs.mv('/workspace/real/d/g', `${through}/g2`)],
      ['grep', () => sb.fs.grep(`${through}/d`, 'secret', { recursive: true })],
      ['sed', () => sb.fs.sed({ path: `${through}/d` }, 'secret', 'x')],
      ['download', () => sb.fs.download(`${through}/d`, path.join(tmp, 'dl'))],
      ['fd readFile', () => sb.fs.readFile('/workspace/fdl/0')],
      ['fd writeFile', () => sb.fs.writeFile('/workspace/fdl/7/x', 'x')],
    ]
    for (const [name, op] of ops) {
      const got = await op().then(
        () => 'succeeded',
        (e) => (e instanceof SandboxError ? e.code : String(e)),
      )
      expect([name, got]).toEqual([name, expect.stringMatching(/^S21[12]$/)])
    }
    const r = await sh('cat /workspace/real/f /workspace/real/d/g; stat -c %a /workspace/real/f; ls /workspace/real')
    expect(r.stdout).toBe('secret\nsecret\n644\nd\nf\n')
  })
})

describe('the host', () => {
  it('no host sysctl changed', () => {
    const after = readSysctls()
    const changed = [...sysctlsBefore].filter(([k, v]) => after.has(k) && after.get(k) !== v).map(([k]) => k)
    expect(changed).toEqual([])
  })
})
