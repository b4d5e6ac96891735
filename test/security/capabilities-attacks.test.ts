/**
 * `capabilities` give root's commands CHOWN, DAC_OVERRIDE, FOWNER, SETUID and SETGID
 * in the sandbox's user namespace. With all five, root tries to hand files to ids outside the
 * sandbox's range, to become such an id, and to reach the host's files and the agent's open
 * directories through /proc. The kernel's answer for an id the namespace does not map is EINVAL
 * (22); for /proc, EACCES (13) or EPERM (1). The kernel-surface attempts of the escape suite
 * run with these capabilities too (test/integration/escape.test.ts).
 * (Issue 28.)
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SANDBOX_ID_BASE, SANDBOX_ID_COUNT } from '../../lib/drivers/idmap.js'
import type { Runtime, SandboxCapability } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'

const ALL_CAPABILITIES: SandboxCapability[] = ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'SETUID', 'SETGID']

// Each attempt prints name=errno (0: it worked). Ids are the sandbox's, so 65536 is the first unmapped one.
const PROBE_SOURCE = `package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

func errno(err error) int {
	if err == nil {
		return 0
	}
	if e, ok := err.(syscall.Errno); ok {
		return int(e)
	}
	if pe, ok := err.(*os.PathError); ok {
		return errno(pe.Err)
	}
	if le, ok := err.(*os.LinkError); ok {
		return errno(le.Err)
	}
	return -1
}

func main() {
	first, _ := strconv.Atoi(os.Args[1]) // the first id the sandbox does not map
	f := "/workspace/owned"
	_ = os.WriteFile(f, []byte("x"), 0o644)
	fmt.Printf("chown_mapped=%d\\n", errno(os.Chown(f, first-1, first-1)))
	fmt.Printf("chown_unmapped_uid=%d\\n", errno(os.Chown(f, first, -1)))
	fmt.Printf("chown_unmapped_gid=%d\\n", errno(os.Chown(f, -1, first)))
	fmt.Printf("chown_host_nobody=%d\\n", errno(os.Chown(f, 4294967294, -1)))
	_, _, e := syscall.RawSyscall(syscall.SYS_SETGROUPS, 1, uintptrOf(uint32(first)), 0)
	fmt.Printf("setgroups_unmapped=%d\\n", int(e))
	_, _, e = syscall.RawSyscall(syscall.SYS_SETRESGID, uintptr(first), uintptr(first), uintptr(first))
	fmt.Printf("setresgid_unmapped=%d\\n", int(e))
	_, _, e = syscall.RawSyscall(syscall.SYS_SETRESUID, uintptr(first), uintptr(first), uintptr(first))
	fmt.Printf("setresuid_unmapped=%d\\n", int(e))
	_, _, e = syscall.RawSyscall(syscall.SYS_SETFSUID, uintptr(first), 0, 0)
	if got, _, _ := syscall.RawSyscall(syscall.SYS_SETFSUID, ^uintptr(0), 0, 0); int(got) == first {
		fmt.Println("setfsuid_unmapped=0")
	} else {
		fmt.Println("setfsuid_unmapped=22")
	}
	// The agent (pid 1) holds the control directory and the writable layer open: its fds, its
	// memory and its root would lead to the host's state directory.
	_, err := os.Readlink("/proc/1/fd/3")
	fmt.Printf("agent_fd_link=%d\\n", errno(err))
	fmt.Printf("agent_mem=%d\\n", errno(openFile("/proc/1/mem")))
	fmt.Printf("agent_environ=%d\\n", errno(openFile("/proc/1/environ")))
	fmt.Printf("agent_map_files=%d\\n", errno(openDir("/proc/1/map_files")))
	held := 0
	for fd := 0; fd < 32; fd++ {
		for _, name := range []string{"state.json", "agent.sock", "activity.json", "."} {
			if _, err := os.Stat("/proc/1/fd/" + strconv.Itoa(fd) + "/" + name); err == nil {
				fmt.Printf("agent_fd_%d_%s=0\\n", fd, name)
			} else {
				held++
			}
		}
	}
	fmt.Printf("agent_fd_paths_held=%d\\n", held)
	fmt.Printf("mknod_block=%d\\n", errno(syscall.Mknod("/workspace/sda", syscall.S_IFBLK|0o600, 8<<8)))
}

func uintptrOf(v uint32) uintptr {
	b := []uint32{v}
	return uintptr(unsafePointer(&b[0]))
}

func openDir(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	return err
}

func openFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Read(make([]byte, 1))
	return err
}
`

const UNSAFE_SOURCE = `package main

import "unsafe"

func unsafePointer(p *uint32) unsafe.Pointer { return unsafe.Pointer(p) }
`

let rt: Runtime
let sb: Sandbox
let tmp: string
let probe: string

beforeAll(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-caps-'))
  fs.writeFileSync(path.join(tmp, 'main.go'), PROBE_SOURCE)
  fs.writeFileSync(path.join(tmp, 'unsafe.go'), UNSAFE_SOURCE)
  fs.writeFileSync(path.join(tmp, 'go.mod'), 'module capprobe\n\ngo 1.19\n')
  probe = path.join(tmp, 'capprobe')
  execFileSync('go', ['build', '-o', probe, '.'], {
    cwd: tmp,
    env: { ...process.env, CGO_ENABLED: '0', GOFLAGS: '-mod=mod', GOCACHE: path.join(tmp, 'cache') },
  })
  rt = testRuntime()
  sb = await rt.create({ image: 'base', driver: 'namespace', capabilities: ALL_CAPABILITIES })
  await sb.fs.upload(probe, '/workspace/capprobe', { mode: 0o755 })
}, 120_000)

afterAll(async () => {
  await rt?.close()
  fs.rmSync(tmp, { recursive: true, force: true })
})

async function run(): Promise<Record<string, string>> {
  // A root host maps SANDBOX_ID_COUNT ids; a host user without subordinate ids maps one.
  const mapped = (await sb.exec('cat', ['/proc/self/uid_map'])).stdout.trim().split(/\s+/)
  const first = Number(mapped[2])
  expect(first === SANDBOX_ID_COUNT || process.getuid?.() !== 0).toBe(true)
  const r = await sb.exec('/workspace/capprobe', [String(first)])
  expect(r.stderr).toBe('')
  return Object.fromEntries(
    r.stdout
      .trim()
      .split('\n')
      .map((l) => l.split('=')),
  )
}

describe('capabilities: root with all five', () => {
  it('capabilities: chown to an id outside the sandbox range, setuid/setgid/setgroups to one, is refused/held', async () => {
    const out = await run()
    // The capability works on the sandbox's own ids: the test would otherwise prove nothing.
    expect(out.chown_mapped).toBe('0')
    expect({
      chown_unmapped_uid: out.chown_unmapped_uid,
      chown_unmapped_gid: out.chown_unmapped_gid,
      chown_host_nobody: out.chown_host_nobody,
      setgroups_unmapped: out.setgroups_unmapped,
      setresgid_unmapped: out.setresgid_unmapped,
      setresuid_unmapped: out.setresuid_unmapped,
      setfsuid_unmapped: out.setfsuid_unmapped,
    }).toEqual({
      chown_unmapped_uid: '22',
      chown_unmapped_gid: '22',
      chown_host_nobody: '22',
      setgroups_unmapped: '22',
      setresgid_unmapped: '22',
      setresuid_unmapped: '22',
      setfsuid_unmapped: '22',
    })
  })

  it("capabilities: reading the agent's fds, memory, environment and mapped files through /proc, and making a device, is refused/held", async () => {
    const out = await run()
    // Listing /proc/1/fd shows only numbers (DAC_OVERRIDE opens the directory); where they lead needs ptrace access.
    for (const key of ['agent_fd_link', 'agent_mem', 'agent_environ', 'agent_map_files', 'mknod_block']) {
      expect([key, out[key]]).toEqual([key, expect.stringMatching(/^(1|13)$/)])
    }
    expect(Object.keys(out).filter((k) => /^agent_fd_\d+_/.test(k))).toEqual([])
    expect(out.agent_fd_paths_held).toBe(String(32 * 4))
  })

  it("capabilities: a file handed to the sandbox's last id is that host id, never a host user's", async () => {
    const last = SANDBOX_ID_COUNT - 1
    const r = await sb.exec('sh', [
      '-c',
      `touch /workspace/last && chown ${last}:${last} /workspace/last && stat -c '%u:%g' /workspace/last`,
    ])
    expect(r.stdout).toBe(`${last}:${last}\n`)
    // The host sees it in the sandbox's range (root host): through the agent's root, from its leaf.
    const leaf = `/sys/fs/cgroup/memory/krunbox/${sb.id}/agent/cgroup.procs`
    if (process.getuid?.() === 0 && fs.existsSync(leaf)) {
      const agent = fs
        .readFileSync(leaf, 'utf8')
        .trim()
        .split('\n')
        .find((p) => fs.readFileSync(`/proc/${p}/cmdline`, 'latin1').startsWith('/krunbox/agent'))
      const host = fs.statSync(`/proc/${agent}/root/workspace/last`)
      expect([host.uid, host.gid]).toEqual([SANDBOX_ID_BASE + last, SANDBOX_ID_BASE + last])
    }
  })
})
