/**
 * Shared kernel budgets. Every sandbox's user namespace was owned by host root, and the
 * kernel charges a namespace's per-user budgets to its owner as well, so one sandbox holding
 * every inotify instance it could (128 per user by default) made inotify_init fail for host root
 * (Node's fs.watch, systemd, udev) and for every other sandbox. On a root host each sandbox's
 * namespace now has an owner uid of its own (lib/drivers/idmap.ts namespaceOwner).
 * (Issue 28.)
 */
import { execFileSync, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Command } from '../../lib/command.js'
import type { Runtime, SandboxCapability } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'

const ALL_CAPABILITIES: SandboxCapability[] = ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'SETUID', 'SETGID']

// Opens inotify instances until the kernel refuses (or argv[1] of them), says how many, and holds them.
const HOG_SOURCE = `package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

func main() {
	max := 1 << 20
	if len(os.Args) > 1 {
		max, _ = strconv.Atoi(os.Args[1])
	}
	n := 0
	var err error
	for n < max {
		if _, err = syscall.InotifyInit1(syscall.IN_CLOEXEC); err != nil {
			break
		}
		n++
	}
	fmt.Printf("opened %d err=%v\\n", n, err)
	time.Sleep(time.Hour)
}
`

let rt: Runtime
let hogBinary: string
let tmp: string
let attacker: Sandbox
let neighbour: Sandbox

beforeAll(async () => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-budgets-'))
  fs.writeFileSync(path.join(tmp, 'main.go'), HOG_SOURCE)
  fs.writeFileSync(path.join(tmp, 'go.mod'), 'module hog\n\ngo 1.19\n')
  hogBinary = path.join(tmp, 'hog')
  execFileSync('go', ['build', '-o', hogBinary, '.'], {
    cwd: tmp,
    env: { ...process.env, CGO_ENABLED: '0', GOFLAGS: '-mod=mod', GOCACHE: path.join(tmp, 'cache') },
  })
  rt = testRuntime()
  ;[attacker, neighbour] = await Promise.all([
    rt.create({ image: 'base', driver: 'namespace', capabilities: ALL_CAPABILITIES }),
    rt.create({ image: 'base', driver: 'namespace' }),
  ])
  await Promise.all([attacker, neighbour].map((sb) => sb.fs.upload(hogBinary, '/workspace/hog', { mode: 0o755 })))
}, 120_000)

afterAll(async () => {
  await rt?.close()
  fs.rmSync(tmp, { recursive: true, force: true })
})

/** Starts the hog and resolves with its report once it has opened what it could. */
function hog(sb: Sandbox, max?: number): Promise<{ command: Command; opened: number; line: string }> {
  const command = sb.start('/workspace/hog', max === undefined ? [] : [String(max)])
  return new Promise((resolve, reject) => {
    let out = ''
    command.on('stdout', (data: Buffer | string) => {
      out += data.toString()
      const m = /opened (\d+) .*\n/.exec(out)
      if (m) resolve({ command, opened: Number(m[1]), line: m[0].trim() })
    })
    command.wait().then((r) => reject(new Error(`the hog ended before it reported: ${JSON.stringify(r)}`)), reject)
  })
}

/** A new inotify instance for host root: a fresh Node process's first fs.watch makes one. */
function hostCanWatch(): { ok: boolean; output: string } {
  const r = spawnSync(
    process.execPath,
    ['-e', "require('fs').watch(require('os').tmpdir()).close(); console.log('watched')"],
    { encoding: 'utf8' },
  )
  return { ok: r.status === 0 && r.stdout.includes('watched'), output: `${r.stdout}${r.stderr}` }
}

describe.skipIf(process.getuid?.() !== 0)('budgets: inotify instances', () => {
  it('budgets: root in a sandbox with all capabilities taking every inotify instance it can is held (host root and another sandbox keep theirs)', async () => {
    expect(hostCanWatch().ok).toBe(true)
    const taken = await hog(attacker)
    // It did take a budget's worth: the limit bit, not something else.
    expect(taken.line).toMatch(/err=too many open files/)
    expect(taken.opened).toBeGreaterThan(0)
    const host = hostCanWatch()
    expect(host).toEqual({ ok: true, output: 'watched\n' })
    const other = await hog(neighbour, 1)
    expect(other.line).toBe('opened 1 err=<nil>')
    await Promise.all([taken.command.cancel(), other.command.cancel()])
  }, 60_000)
})
