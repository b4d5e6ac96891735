/**
 * REAL libkrun microVMs through the Runtime API (create, exec, fs, no
 * network, stop, boot time). `krunbox doctor --boot` checks the same on one VM (docs/krun.md). It runs only where the probe says krun can boot (hardware KVM,
 * libkrun and libkrunfw loadable); elsewhere the suite is skipped with the probe's reason in its
 * title. KRUNBOX_REQUIRE_VM=1 turns that skip into a failure (for CI runners that must have KVM).
 * Timing goals live in bench/krun-vm.ts; the bounds here are only sanity limits.
 * (Issue 6, the VM tier.)
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { hostProbe } from '../../lib/probe.js'
import { Runtime, runtimeState } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { libkrunDoublePath } from '../fixtures/libkrun-double/index.js'
import { asNobody, asRoot, checkoutUnreachable, NOBODY } from '../helpers/rootless.js'
import { processesMentioning } from '../helpers/runtime.js'
import { SHARED_CACHE } from '../images/helpers.js'
import { makeTempDir, until } from '../native/helpers.js'

function vmUnavailableReason(): string | null {
  if (process.env.KRUNBOX_LIBKRUN_PATH === libkrunDoublePath)
    return 'KRUNBOX_LIBKRUN_PATH points at the libkrun test double, not libkrun'
  if (process.env.KRUNBOX_KRUN_ASSUME_USABLE === '1') return 'KRUNBOX_KRUN_ASSUME_USABLE=1 is set (a test-double run)'
  return hostProbe().krunUnavailableReason
}

const reason = vmUnavailableReason()
const requireVm = process.env.KRUNBOX_REQUIRE_VM === '1'

describe.runIf(reason !== null && requireVm)('the VM tier is required here (KRUNBOX_REQUIRE_VM=1)', () => {
  it('can boot microVMs on this host', () => {
    expect.fail(`KRUNBOX_REQUIRE_VM=1, but microVMs cannot boot on this host: ${reason}`)
  })
})

describe.skipIf(reason !== null)(`krun microVMs${reason === null ? '' : ` (skipped: ${reason})`}`, () => {
  const MEMORY_MB = 512
  const CPUS = 2
  let tmp: ReturnType<typeof makeTempDir>
  let stateDir: string
  let rt: Runtime
  let sb: Sandbox

  beforeAll(async () => {
    tmp = makeTempDir('krunbox-vm-')
    stateDir = path.join(tmp.dir, 'state')
    rt = new Runtime({ stateDir, cacheDir: SHARED_CACHE })
    sb = await rt.create({ driver: 'krun', cpus: CPUS, memoryMb: MEMORY_MB })
  }, 120_000)
  afterAll(async () => {
    await rt?.close()
    tmp?.cleanup()
  })

  it('boots a VM whose guest sees exactly the configured vCPUs and memory', async () => {
    expect(sb.driver).toBe('krun')
    expect(sb.status).toBe('ready')
    const r = await sb.exec('sh', ['-c', 'nproc; grep MemTotal /proc/meminfo'])
    expect(r.exitCode).toBe(0)
    const [nproc, meminfo] = r.stdout.trim().split('\n')
    expect(Number(nproc)).toBe(CPUS)
    const memTotalKb = Number(/(\d+) kB/.exec(meminfo)![1])
    // The guest kernel keeps some memory for itself; the host's memory is far larger.
    expect(memTotalKb).toBeLessThanOrEqual(MEMORY_MB * 1024)
    expect(memTotalKb).toBeGreaterThan((MEMORY_MB * 1024) / 2)
  })

  it('is PID 1 of the VM and keeps create env with spaces and quotes intact', async () => {
    expect((await sb.exec('cat', ['/proc/1/cmdline'])).stdout).toMatch(/krunbox.agent/)
    const other = await rt.create({ driver: 'krun', env: { SPACED: 'hello "vm" world' } })
    try {
      expect((await other.exec('sh', ['-c', 'printf %s "$SPACED"'])).stdout).toBe('hello "vm" world')
    } finally {
      await other.stop()
    }
  })

  it('runs commands: output, exit codes, stdin, env', async () => {
    const r = await sb.exec('sh', ['-c', 'echo out; echo err >&2; echo "$GREETING"; exit 7'], {
      env: { GREETING: 'hello' },
    })
    expect(r).toMatchObject({ stdout: 'out\nhello\n', stderr: 'err\n', exitCode: 7 })
    expect((await sb.exec('cat', [], { stdin: 'piped in' })).stdout).toBe('piped in')
  })

  it('reads and writes files over the protocol and sees them from commands', async () => {
    await sb.fs.writeFile('/workspace/vm.txt', 'written by the host\n')
    expect((await sb.exec('cat', ['/workspace/vm.txt'])).stdout).toBe('written by the host\n')
    await sb.exec('sh', ['-c', 'echo from the guest > /etc/motd'])
    expect((await sb.fs.readFile('/etc/motd')).data.toString()).toBe('from the guest\n')
    // The image is shared read-only: the write landed in the sandbox's own layer.
    const hostCopy = path.join((await rt.images.resolve('base')).rootfs, 'etc', 'motd')
    const hostText = fs.existsSync(hostCopy) ? fs.readFileSync(hostCopy, 'utf8') : null
    expect(hostText).not.toBe('from the guest\n')
  })

  it('holds the commands to pidsMax in the guest: a pipeline runs, a fork bomb is contained', async () => {
    const small = await rt.create({ driver: 'krun', pidsMax: 8 })
    try {
      expect((await small.exec('sh', ['-c', 'echo a | cat'])).stdout).toBe('a\n')
      // 20 background sleeps where 8 tasks are allowed: the shell is refused a fork.
      const bomb = await small.exec('sh', ['-c', 'p=; for i in $(seq 20); do sleep 30 & p="$p $!"; done; kill $p'])
      expect(bomb.exitCode).not.toBe(0)
      // The sleeps that did start still hold their tasks; one shell builtin ends them all (PID 1,
      // the agent, is never a target of kill -1). The agent's threads are outside the limit.
      await small.exec('sh', ['-c', 'kill -9 -1'])
      expect((await small.exec('echo', ['still here'])).stdout).toBe('still here\n')
    } finally {
      await small.stop()
    }
  })

  it('has no network by default: lo, and dummy0 unconfigured on libkrunfw 5.4+, and connections fail', async () => {
    const dev = await sb.exec('cat', ['/proc/net/dev'])
    const names = dev.stdout
      .split('\n')
      .slice(2)
      .map((l) => l.split(':')[0].trim())
      .filter(Boolean)
      .sort()
    // libkrunfw >= 5.4 builds its kernel with CONFIG_DUMMY=y: dummy0 exists; libkrun's init only
    // configures it for TSI (libkrun 495b8007), which krunbox turns off.
    expect([['lo'], ['dummy0', 'lo']]).toContainEqual(names)
    expect((await sb.exec('cat', ['/proc/net/route'])).stdout.trim().split('\n').slice(1)).toEqual([])
    // busybox wget -T segfaults (a busybox bug): timeout bounds it instead.
    const r = await sb.exec('timeout', ['3', 'wget', '-q', '-O', '/dev/null', 'http://1.1.1.1/'], { timeoutMs: 10_000 })
    expect(r.exitCode).not.toBe(0)
  })

  it('runs as many vCPUs as the guest kernel has (16) and refuses more', async () => {
    const wide = await rt.create({ driver: 'krun', cpus: 16 })
    try {
      expect((await wide.exec('nproc')).stdout.trim()).toBe('16')
    } finally {
      await wide.stop()
    }
    await expect(rt.create({ driver: 'krun', cpus: 17 })).rejects.toMatchObject({ code: 'S003' })
  })

  it("boots within a bootTimeoutMs shorter than libkrun's 5 s hold of an early vsock connection (the host waits for agent.listening)", async () => {
    const quick = await rt.create({ driver: 'krun', bootTimeoutMs: 3000 })
    expect(quick.status).toBe('ready')
    await quick.stop()
  })

  it('boots again and again in bounded time (figures: bench/krun-vm.ts)', async () => {
    for (let i = 0; i < 3; i++) {
      const t0 = performance.now()
      const other = await rt.create({ driver: 'krun' })
      const ms = performance.now() - t0
      expect(ms).toBeLessThan(15_000)
      expect((await other.exec('true')).exitCode).toBe(0)
      await other.stop()
    }
  }, 120_000)

  it('stops: the VM process ends and nothing is left on the host', async () => {
    const pid = runtimeState(rt).read(sb.id)!.pid
    await sb.stop()
    expect(sb.status).toBe('destroyed')
    expect(await until(() => !fs.existsSync(`/proc/${pid}`) && processesMentioning(sb.id).length === 0, 5000)).toBe(
      true,
    )
    expect(fs.existsSync(path.join(stateDir, sb.id))).toBe(false)
  })

  it.skipIf(!asRoot || checkoutUnreachable !== null)(
    "runs for an unprivileged user: the guest sees the image as root's and writes it privately",
    async () => {
      // nobody reaches /dev/kvm through its group, as a user in the kvm group would.
      const kvmGroup = fs.statSync('/dev/kvm').gid
      const { work, result: r, cleanup } = await asNobody('rootless-child.ts', () => ['krun'], { groups: [kvmGroup] })
      try {
        expect(r.uid).toBe(NOBODY)
        expect(r.exitCode).toBe(0)
        expect(r.stdout).toMatch(/^0\nprivate\nCapEff:\s+0+\n$/)
        expect(r.status).toBe('destroyed')
        expect(fs.readdirSync(path.join(work, 'state')).filter((n) => !n.startsWith('.'))).toEqual([])
      } finally {
        cleanup()
      }
    },
    180_000,
  )
})
