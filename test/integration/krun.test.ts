/**
 * The krun driver end to end through the Runtime API, with the libkrun TEST DOUBLE
 * (build/test/libkrun-double.so) in place of libkrun. The double's krun_start_enter runs the
 * REAL agent copy in the boot dir as the guest's PID 1, in VM mode, in namespaces standing in for
 * the guest (its shares as bind mounts, its vsock port as a unix socket behind the double's model
 * of libkrun's vsock muxer). Real microVMs: krun-vm.test.ts, on hosts that can boot them.
 *
 * KRUNBOX_KRUN_ASSUME_USABLE=1 lets driver 'krun' past the hardware checks (this host's KVM
 * backend is software); libkrun (here: the double) must still load.
 * (Issue 6.)
 */
import { execFileSync, spawn } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import readline from 'node:readline'
import { fileURLToPath } from 'node:url'
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest'
import { SANDBOX_ID_BASE, stagedPaths } from '../../lib/drivers/idmap.js'
import { AGENT_VSOCK_PORT } from '../../lib/drivers/krun.js'
import { KRUN_IMAGE_TAG } from '../../lib/drivers/krun-shim-codec.js'
import { SandboxError } from '../../lib/errors.js'
import { errnoName, probe } from '../../lib/native.js'
import { agentBinaryPath } from '../../lib/paths.js'
import { hostProbe, libraryReason } from '../../lib/probe.js'
import { Runtime, runtimeState } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { sha256 } from '../../lib/state.js'
import { doctorReport } from '../../lib/cli/doctor.js'
import {
  libkrunDoublePath,
  libkrunDoubleProfile,
  libkrunfwDoubleDir,
  readDoubleLog,
  type DoubleGuest,
} from '../fixtures/libkrun-double/index.js'
import { PATHS_TOWARD_HOST_STATE } from '../helpers/escape-attempts.js'
import { asNobody, asRoot, checkoutUnreachable, NOBODY } from '../helpers/rootless.js'
import { processesMentioning } from '../helpers/runtime.js'
import { SHARED_CACHE } from '../images/helpers.js'
import { ensureNativeBuilt, fdsFromLsOutput, makeTempDir, repoRoot, until } from '../native/helpers.js'
import { restoreEnv } from '../helpers/env.js'

const fixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'fixtures')
const TSX_LOADER = path.join(repoRoot, 'node_modules', 'tsx', 'dist', 'loader.mjs')
/** The probe as this machine answers it without any override, for skip conditions. */
const machine = probe()

const tmp = makeTempDir('krunbox-krun-')
const stateDir = path.join(tmp.dir, 'state')
const savedEnv = { ...process.env }
let rt: Runtime
let log: string
let runs = 0

function useDouble(): void {
  process.env.KRUNBOX_KRUN_ASSUME_USABLE = '1'
  process.env.KRUNBOX_LIBKRUN_PATH = libkrunDoublePath
  delete process.env.KRUN_DOUBLE_ENTER
  process.env.LD_LIBRARY_PATH = libkrunfwDoubleDir // libkrunfw.so.5 loadable by name, as libkrun needs
  delete process.env.KRUN_DOUBLE_FAIL
}

/** What the double computed the guest sees (the krun_start_enter line of the call log). */
function guestOf(logFile: string): DoubleGuest {
  return readDoubleLog(logFile).find((c) => c.call === 'krun_start_enter')!.guest as DoubleGuest
}

/** The temp file the agent writes activity.json through (agent/lifecycle: writeCtlFile), renamed at once. */
const ACTIVITY_TEMP = '.activity.json.tmp'

/** A control dir file's text; '' for a directory, or for the agent's temp file renamed away meanwhile. */
function fileTextIfAny(file: string): string {
  try {
    return fs.statSync(file).isFile() ? fs.readFileSync(file, 'utf8') : ''
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return ''
    throw err
  }
}

/**
 * On a root host the shim, and so the double's guest, runs as the sandbox id range, which must be
 * able to reach the double in the checkout. Null when it can, else why boots are skipped.
 */
const doubleCannotBoot = asRoot ? checkoutUnreachable : null
const bootTitle = (title: string) => (doubleCannotBoot ? `${title} (skipped: ${doubleCannotBoot})` : title)

/**
 * A path as the shim opens it: on a root host the driver stages the boot dir, boot config,
 * image, control dir and console (in that order) at STAGE_DIR/0.. for the sandbox's ids.
 */
function shimSees(hostPath: string, index: number): string {
  return asRoot ? stagedPaths(5)[index] : hostPath
}

beforeAll(() => {
  ensureNativeBuilt()
  useDouble()
  hostProbe({ refresh: true }) // the probe is cached per process: let it see the double
  rt = new Runtime({ stateDir, cacheDir: SHARED_CACHE })
})
beforeEach(() => {
  useDouble()
  log = path.join(tmp.dir, `calls-${++runs}.jsonl`)
  // The shim (and so the double) runs as the sandbox's ids, unprivileged on the host.
  fs.chmodSync(tmp.dir, 0o755)
  fs.writeFileSync(log, '', { mode: 0o666 })
  fs.chmodSync(log, 0o666)
  process.env.KRUN_DOUBLE_LOG = log
})
afterEach(() => {
  restoreEnv(savedEnv)
})
afterAll(async () => {
  await rt?.close()
  hostProbe({ refresh: true })
  tmp.cleanup()
})

/** What a sandbox could leave on the host: processes, its state entry (socket, boot dir), cgroups. */
function leftovers(id: string): string[] {
  // A process that is gone by the time its command line is read is not left over.
  const found = processesMentioning(id)
    .map((pid) => `process ${pid}: ${readCmdline(pid)}`)
    .filter((line) => !line.endsWith(': (gone)'))
  if (fs.existsSync(path.join(stateDir, id)))
    found.push(`state dir ${path.join(stateDir, id)}: ${fs.readdirSync(path.join(stateDir, id)).join(', ')}`)
  for (const dir of [`memory/krunbox/${id}`, `pids/krunbox/${id}`, `cpu/krunbox/${id}`, `krunbox/${id}`]) {
    if (fs.existsSync(`/sys/fs/cgroup/${dir}`)) found.push(`cgroup /sys/fs/cgroup/${dir}`)
  }
  return found
}

async function expectNothingLeft(id: string): Promise<void> {
  // Killed processes can take a moment to leave /proc.
  await until(() => leftovers(id).length === 0, 15_000)
  expect(leftovers(id)).toEqual([])
}

/** Every process below pid (the double's guest runs as the shim's child, in its own PID namespace). */
function descendants(pid: number): number[] {
  const parents = new Map<number, number>()
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8')
      parents.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]))
    } catch {}
  }
  const found: number[] = []
  const walk = (p: number) => {
    for (const [child, parent] of parents) if (parent === p) walk(found[found.push(child) - 1])
  }
  walk(pid)
  return found
}

function readCmdline(pid: number): string {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').replaceAll('\0', ' ')
  } catch {
    return '(gone)'
  }
}

function isAlive(pid: number): boolean {
  try {
    return !/^\S+ \(.*\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'))
  } catch {
    return false
  }
}

/** Creates without waiting and returns the settled sandbox with its boot error. */
async function createFailing(
  options: Parameters<Runtime['create']>[0],
): Promise<{ sb: Sandbox; err: SandboxError; ms: number }> {
  const t0 = performance.now()
  const sb = await rt.create({ driver: 'krun', wait: false, ...options })
  const err = await sb.ready().then(
    () => {
      throw new Error(`sandbox ${sb.id} booted, but a boot failure was expected`)
    },
    (e: unknown) => e as SandboxError,
  )
  expect(err).toBeInstanceOf(SandboxError)
  expect(sb.status).toBe('failed')
  expect(sb.error).toBe(err)
  return { sb, err, ms: performance.now() - t0 }
}

/** The error of a create that must be refused before anything boots. */
async function refusal(): Promise<SandboxError> {
  return rt.create({ driver: 'krun' }).then(
    (sb) => {
      throw new Error(`sandbox ${sb.id} was created, but a refusal was expected`)
    },
    (e: unknown) => e as SandboxError,
  )
}

function interfaces(procNetDev: string): string[] {
  return procNetDev
    .split('\n')
    .slice(2)
    .map((line) => line.split(':')[0].trim())
    .filter(Boolean)
    .sort()
}

describe('the probe on this machine', () => {
  // Where microVMs can boot, krun-vm.test.ts covers driver 'krun' instead.
  it.skipIf(machine.krunUnavailableReason === null)(
    'refuses driver krun without the override in under 1 s, with S301 and the probe reason',
    async () => {
      delete process.env.KRUNBOX_KRUN_ASSUME_USABLE
      const reason = hostProbe().krunUnavailableReason
      expect(reason).not.toBeNull()
      const t0 = performance.now()
      const err = await refusal()
      expect(performance.now() - t0).toBeLessThan(1000)
      expect(err).toBeInstanceOf(SandboxError)
      expect(err.code).toBe('S301')
      expect(err.message).toContain(reason!)
      expect(rt.liveCount).toBe(0)
    },
  )

  it.skipIf(!machine.kvm.softwareBackend)(
    `names the software KVM backend (${machine.kvm.backend ?? 'none'} here)`,
    async () => {
      // /dev/kvm may be absent even with the module loaded: assert what the machine has.
      expect(machine.kvm).toMatchObject({
        devicePresent: fs.existsSync('/dev/kvm'),
        softwareBackend: true,
        hardwareVirt: false,
        usable: false,
      })
      expect(machine.krunUnavailableReason).toMatch(new RegExp(`software KVM backend ${machine.kvm.backend}`))
      expect(doctorReport(hostProbe())).toContain(`krun unavailable: software KVM backend ${machine.kvm.backend}`)
      delete process.env.KRUNBOX_KRUN_ASSUME_USABLE
      const err = await refusal()
      expect(err.code).toBe('S301')
      expect(err.message).toMatch(/software KVM backend kvm_\w+/)
    },
  )
})

describe.skipIf(doubleCannotBoot !== null)(bootTitle('a krun sandbox over the libkrun double'), () => {
  it('configures the VM, hands over the socket, serves exec and fs, and stops without a trace', async () => {
    const image = await rt.images.resolve('base')
    const sb = await rt.create({ driver: 'krun', cpus: 2, memoryMb: 768 })
    expect(sb.driver).toBe('krun')
    expect(sb.status).toBe('ready')
    const sandboxDir = path.join(stateDir, sb.id)
    const shimPid = runtimeState(rt).read(sb.id)!.pid

    const calls = readDoubleLog(log)
    expect(calls.map((c) => c.call)).toEqual([
      'krun_set_log_level',
      'krun_create_ctx',
      'krun_has_feature',
      'krun_set_vm_config',
      'krun_set_root',
      'krun_add_virtiofs3',
      'krun_add_virtiofs3',
      'krun_add_virtiofs3',
      'krun_set_exec',
      'krun_disable_implicit_vsock',
      'krun_add_vsock',
      'krun_add_vsock_port2',
      'krun_set_console_output',
      'krun_start_enter',
    ])
    expect(calls.every((c) => c.rc >= 0)).toBe(true)
    expect(calls[1].rc).toBe(0) // libkrun's context ids start at 0
    const call = Object.fromEntries(calls.map((c) => [c.call, c]))
    expect(call.krun_set_vm_config).toMatchObject({ num_vcpus: 2, ram_mib: 768 })
    // libkrun's warnings reach the shim's stderr (a failed socket bind is only one).
    expect(call.krun_set_log_level).toMatchObject({ level: 2, warnings: true })
    expect(call.krun_set_root).toMatchObject({ root_path: shimSees(path.join(sandboxDir, 'boot'), 0) })
    const shares = calls.filter((c) => c.call === 'krun_add_virtiofs3')
    expect(shares[0]).toMatchObject({ c_tag: KRUN_IMAGE_TAG, c_path: shimSees(image.rootfs, 2), read_only: true })
    // Only the control dir is shared writable (never the state dir); the config has a read-only share of its own.
    expect(shares[1]).toMatchObject({
      c_tag: 'krunbox-ctl',
      c_path: shimSees(path.join(sandboxDir, 'ctl'), 3),
      read_only: false,
    })
    expect(shares[2]).toMatchObject({
      c_tag: 'krunbox-boot',
      c_path: shimSees(path.join(sandboxDir, 'boot-config'), 1),
      read_only: true,
    })
    expect(call.krun_set_exec).toMatchObject({ exec_path: '/krunbox-agent', argv: [] })
    // Nothing of the host's environment and nothing secret on the kernel command line.
    expect(call.krun_set_exec.envp).toEqual(['KRUN_INIT_PID1=1', 'KRUNBOX_BOOT=vm', `HOSTNAME=sb-${sb.id.slice(0, 8)}`])
    const guest = guestOf(log)
    expect(guest).toMatchObject({ init: '/init.krun', pid1: true, lostDevices: [] })
    expect(guest.cmdline).not.toContain(sha256(sb.accessToken!))
    expect(guest.cmdline).not.toContain(sb.id.slice(9))
    // The agent read its config; the host deleted it once the agent answered.
    expect(fs.existsSync(path.join(sandboxDir, 'boot-config'))).toBe(false)
    expect(call.krun_add_vsock).toMatchObject({ tsi_features: 0 })
    expect(call.krun_add_vsock_port2).toMatchObject({
      port: AGENT_VSOCK_PORT,
      c_filepath: path.join(shimSees(path.join(sandboxDir, 'ctl'), 3), 'agent.sock'),
      listen: true,
    })
    expect(call.krun_set_console_output).toMatchObject({
      c_filepath: shimSees(path.join(sandboxDir, 'console.log'), 4),
    })
    // The VMM runs as the sandbox's ids: on a root host the unprivileged range, never host root.
    expect(fs.readFileSync(`/proc/${shimPid}/status`, 'utf8')).toMatch(
      new RegExp(`^Uid:\\s+${asRoot ? SANDBOX_ID_BASE : process.getuid!()}\\s`, 'm'),
    )

    // The guest root holds a copy of the agent, never the host's file itself (the share is writable).
    const guestAgent = path.join(sandboxDir, 'boot', 'krunbox-agent')
    expect(fs.statSync(guestAgent).ino).not.toBe(fs.statSync(agentBinaryPath()).ino)
    expect(digest(guestAgent)).toBe(digest(agentBinaryPath()))
    // The control socket is the one libkrun was told to create.
    expect(fs.statSync(path.join(sandboxDir, 'ctl', 'agent.sock')).isSocket()).toBe(true)

    const r = await sb.exec('sh', ['-c', 'echo "answer $((6 * 7))"; cat /proc/net/dev'])
    expect(r.exitCode).toBe(0)
    expect(r.stdout).toMatch(/^answer 42\n/)
    expect(interfaces(r.stdout.slice(r.stdout.indexOf('\n') + 1))).toEqual(['lo'])
    await sb.fs.writeFile('/workspace/note.txt', 'from the host\n')
    expect((await sb.fs.readFile('/workspace/note.txt')).data.toString()).toBe('from the host\n')
    expect((await sb.exec('cat', ['/workspace/note.txt'])).stdout).toBe('from the host\n')

    expect(isAlive(shimPid)).toBe(true)
    await sb.stop()
    expect(sb.status).toBe('destroyed')
    expect(isAlive(shimPid)).toBe(false)
    await expectNothingLeft(sb.id)
  })

  it('refuses a network policy at create (S111): TSI could not enforce it, and no VM boots open', async () => {
    const before = readDoubleLog(log).length
    for (const network of [true, { allow: ['example.test'] }]) {
      await expect(rt.create({ driver: 'krun', network })).rejects.toMatchObject({ code: 'S111' })
    }
    expect(readDoubleLog(log).length).toBe(before)
  })
})

describe.skipIf(doubleCannotBoot !== null)(bootTitle('what reaches the guest (double)'), () => {
  it.skipIf(!asRoot)(
    "for an unprivileged host user, the shim's user namespace maps the user to the guest's root",
    async () => {
      const { work, result: r, cleanup } = await asNobody('rootless-child.ts', () => ['krun'])
      try {
        expect(r.uid).toBe(NOBODY)
        expect(r.exitCode).toBe(0)
        // uid 0 inside, the image (owned by nobody on the host) writable as root's, no capabilities.
        expect(r.stdout).toMatch(/^0\nprivate\nCapEff:\s+0+\n$/)
        expect(r.status).toBe('destroyed')
        expect(guestOf(log)).toMatchObject({ pid1: true })
        expect(fs.readdirSync(path.join(work, 'state')).filter((n) => !n.startsWith('.'))).toEqual([])
      } finally {
        cleanup()
      }
    },
    120_000,
  )

  it('a guest cannot reach the state directory: only the control directory is shared, and a forged state.json lands nowhere on the host', async () => {
    const sb = await rt.create({ driver: 'krun' })
    const sandboxDir = path.join(stateDir, sb.id)
    const record = fs.readFileSync(path.join(sandboxDir, 'state.json'), 'utf8')
    const r = await sb.exec('sh', [
      '-c',
      'for p in /krunbox/ctl/state.json /krunbox/state.json /state.json; do (echo forged > $p) 2>/dev/null; done; find / -xdev -name state.json 2>/dev/null; echo done',
    ])
    expect(r.stdout).toBe('/state.json\ndone\n') // only its own file, in its own root
    for (const p of ['/krunbox/ctl/state.json', ...PATHS_TOWARD_HOST_STATE]) {
      const answer = await sb.fs.writeFile(p, 'forged').then(
        () => 'written',
        (e) => (e instanceof SandboxError ? e.code : String(e)),
      )
      expect([p, answer]).toEqual([p, expect.stringMatching(/^S21[0-2]$/)])
    }
    expect(fs.readFileSync(path.join(sandboxDir, 'state.json'), 'utf8')).toBe(record)
    // The agent rewrites activity.json after each command through a temp file it then renames.
    expect(
      fs
        .readdirSync(path.join(sandboxDir, 'ctl'))
        .filter((n) => n !== ACTIVITY_TEMP)
        .sort(),
    ).toEqual(['activity.json', 'agent.sock'])
    await sb.stop()
  })

  it('create env, exec env and args with spaces, quotes, =, non-ASCII and 60 KiB arrive byte for byte; nothing secret on the command line', async () => {
    const env = {
      SPACE: 'hello world',
      QUOTE: 'say "hi"',
      EQ: 'a=b=c',
      UTF: 'grüße 😀',
      INJECT: 'a init=/bin/sh b',
      BIG: 'x'.repeat(60 * 1024),
    }
    const sb = await rt.create({ driver: 'krun', env })
    try {
      const keys = Object.keys(env)
      const r = await sb.exec(
        'sh',
        [
          '-c',
          `printf '%s\\n' ${[...keys, 'EXEC'].map((k) => `"$${k}"`).join(' ')}; printf '%s|' "$@"`,
          'sh',
          'arg one',
          'q"uote',
          'k=v',
          'ü',
        ],
        { env: { EXEC: 'exec "env" ü' } },
      )
      expect(r.stdout).toBe([...Object.values(env), 'exec "env" ü'].join('\n') + '\narg one|q"uote|k=v|ü|')
      const guest = guestOf(log)
      expect(guest.init).toBe('/init.krun')
      expect(guest.cmdline).not.toContain(sha256(sb.accessToken!))
      expect(guest.cmdline).not.toContain('hello')
      expect(guest.env.filter((e) => !/^(HOME|TERM|KRUN_INIT)=/.test(e))).toEqual([
        'KRUN_INIT_PID1=1',
        'KRUNBOX_BOOT=vm',
        `HOSTNAME=sb-${sb.id.slice(0, 8)}`,
      ])
      // Commands cannot read the agent's environment, and the control dir holds no config.
      expect((await sb.exec('cat', ['/proc/1/environ'])).stdout).not.toContain(sha256(sb.accessToken!))
      const ctl = path.join(stateDir, sb.id, 'ctl')
      for (const name of fs.readdirSync(ctl))
        expect(fileTextIfAny(path.join(ctl, name))).not.toContain(sha256(sb.accessToken!))
      expect((await sb.exec('hostname')).stdout.trim()).toBe(`sb-${sb.id.slice(0, 8)}`)
    } finally {
      await sb.stop()
    }
  })

  it('the agent is PID 1: it reaps an orphaned grandchild and survives kill -9 -1 from a command', async () => {
    const sb = await rt.create({ driver: 'krun' })
    try {
      expect(guestOf(log).pid1).toBe(true)
      expect((await sb.exec('cat', ['/proc/1/cmdline'])).stdout).toMatch(/krunbox.agent/)
      const orphan = await sb.exec('sh', ['-c', '(sleep 0.2 &); echo $!'])
      expect(orphan.exitCode).toBe(0)
      const zombies = async () =>
        (await sb.exec('sh', ['-c', 'cat /proc/[0-9]*/stat 2>/dev/null'])).stdout
          .split('\n')
          .filter((l) => / Z /.test(l))
      const deadline = Date.now() + 5000
      let left = await zombies()
      while (left.length > 0 && Date.now() < deadline) left = await zombies()
      expect(left).toEqual([])
      await sb.exec('sh', ['-c', 'kill -9 -1'])
      expect((await sb.exec('echo', ['alive'])).stdout).toBe('alive\n')
    } finally {
      await sb.stop()
    }
  })

  it("the agent's VM boot path (agent/boot/vm.go): config from the krunbox-boot share, then unmounted; image and control shares mounted; its own end is a reboot the VMM exits on", async () => {
    const sb = await rt.create({ driver: 'krun', idleTimeoutMs: 1000 })
    const shimPid = runtimeState(rt).read(sb.id)!.pid
    // The boot share is gone once read; commands see neither it, the shares' tags nor the double's stand-ins.
    const mounts = (await sb.exec('cat', ['/proc/self/mountinfo'])).stdout
    expect(mounts).not.toMatch(/krunbox-boot|krun-double|boot-config/)
    expect((await sb.exec('cat', ['/proc/1/cmdline'])).stdout).toBe('/krunbox-agent\0')
    // Idle for its timeout, the agent ends the sandbox itself: exit.json in the control share, then
    // reboot(RESTART), on which the "VMM" (the shim) exits.
    await sb.waitFor('destroyed', { timeoutMs: 30_000 })
    expect(sb.destroyedReason).toBe('idle_expired')
    expect(await until(() => !isAlive(shimPid), 5000)).toBe(true)
    await expectNothingLeft(sb.id)
  })

  it('a boot that fails in the agent ends the VM (reboot RESTART) and reaches the caller as S300, not at the boot timeout', async () => {
    // A guest without the double's device stand-ins (as a kernel without virtio-fs): the agent
    // cannot mount its boot share, fails at its config stage, and restarts the "VM".
    process.env.KRUN_DOUBLE_NO_DEVICES = '1'
    const { sb, err, ms } = await createFailing({ bootTimeoutMs: 60_000 })
    expect(err.code).toBe('S300')
    expect(err.details!.consoleTail).toContain('"stage":"config"')
    expect(ms).toBeLessThan(5000)
    await expectNothingLeft(sb.id)
  })
})

describe('the version gate', () => {
  const useLibkrun = (file: string) => {
    process.env.KRUNBOX_LIBKRUN_PATH = file
    return hostProbe({ refresh: true })
  }
  afterEach(() => {
    useDouble()
    delete process.env.KRUNBOX_LIBKRUN_PATH
    process.env.KRUNBOX_LIBKRUN_PATH = libkrunDoublePath
    hostProbe({ refresh: true })
  })

  it('with the 1.17 symbol set: krun fails at once with S311 naming krun_add_virtiofs3 and 1.18.0, auto picks namespace and says why, doctor too', async () => {
    const p = useLibkrun(libkrunDoubleProfile('1.17'))
    expect(p.libkrun.missingSymbols).toEqual(['krun_add_virtiofs3'])
    const err = await refusal()
    expect(err.code).toBe('S311')
    expect(err.message).toMatch(/krun_add_virtiofs3 \(since 1\.18\.0\).*libkrun 1\.18\.1 or newer/)
    const warnings: string[] = []
    const onWarning = (w: Error) => warnings.push(w.message)
    process.on('warning', onWarning)
    const sb = await rt.create({ driver: 'auto' })
    await new Promise((r) => setImmediate(r))
    process.off('warning', onWarning)
    expect(sb.driver).toBe('namespace')
    await sb.stop()
    expect(warnings.join('\n')).toContain('krun_add_virtiofs3')
    expect(doctorReport(p)).toMatch(
      /libkrun: +too old .*krun_add_virtiofs3 \(since 1\.18\.0\); libkrun 1\.18\.1 or newer is required/,
    )
  })

  /** The 1.19 double installed the way packages install libkrun: the real file named by its version, libkrun.so.1 a link to it. */
  function installedAs(version: string): string {
    const dir = path.join(tmp.dir, `installed-${version}`)
    fs.mkdirSync(dir, { recursive: true })
    fs.copyFileSync(libkrunDoublePath, path.join(dir, `libkrun.so.${version}`))
    fs.rmSync(path.join(dir, 'libkrun.so.1'), { force: true })
    fs.symlinkSync(`libkrun.so.${version}`, path.join(dir, 'libkrun.so.1'))
    return path.join(dir, 'libkrun.so.1')
  }

  it('libkrun 1.18.0 (every symbol, but the vsock stall) is S311 naming libkrun#772 and the fix, read from the file actually loaded; doctor says so', async () => {
    const p = useLibkrun(installedAs('1.18.0'))
    expect(p.libkrun).toMatchObject({
      loadable: true,
      missingSymbols: [],
      version: '1.18.0',
      resolvedPath: path.join(tmp.dir, 'installed-1.18.0', 'libkrun.so.1.18.0'),
    })
    const err = await refusal()
    expect(err.code).toBe('S311')
    expect(err.message).toMatch(
      /libkrun 1\.18\.0, which stalls guest→host vsock traffic after about 256 KiB \(libkrun#772, fixed in 1\.18\.1 by 1bebfaac\): install libkrun 1\.18\.1 or newer/,
    )
    expect(doctorReport(p)).toMatch(
      /libkrun: +too old \(.*libkrun\.so\.1\.18\.0, version 1\.18\.0\): it stalls .*#772.*; libkrun 1\.18\.1 or newer is required/,
    )
  })

  it('libkrun 1.18.1 passes, and doctor shows the version of the file loaded', () => {
    const p = useLibkrun(installedAs('1.18.1'))
    expect(libraryReason(p)).toBeNull()
    expect(doctorReport(p)).toMatch(
      /libkrun: +loadable \(.*libkrun\.so\.1\.18\.1, version 1\.18\.1; minimum 1\.18\.1\)/,
    )
  })

  it('a libkrun built without its init blob: S311 at create, saying the guest would have no /init.krun; doctor says so', async () => {
    process.env.KRUN_DOUBLE_NO_INIT_BLOB = '1'
    const p = useLibkrun(libkrunDoublePath)
    expect(p.libkrun.initBlob).toBe(false)
    const err = await refusal()
    expect(err.code).toBe('S311')
    expect(err.message).toContain(
      'built without its init blob (krun_has_feature(KRUN_FEATURE_INIT_BLOB) is 0), so a guest has no /init.krun',
    )
    expect(doctorReport(p)).toContain('built WITHOUT its init blob')
  })

  it.each(['1.18', '1.19'] as const)('with the %s symbol set the libraries pass', (version) => {
    const p = useLibkrun(libkrunDoubleProfile(version))
    expect(p.libkrun).toMatchObject({ loadable: true, missingSymbols: [] })
    expect(p.libkrunfw.loadable).toBe(true)
  })

  it('a libkrunfw next to libkrun but not loadable by name: S311, and doctor says why', async () => {
    const dir = path.join(tmp.dir, 'beside')
    fs.mkdirSync(dir, { recursive: true })
    fs.copyFileSync(libkrunDoublePath, path.join(dir, 'libkrun.so.1'))
    fs.copyFileSync(path.join(libkrunfwDoubleDir, 'libkrunfw.so.5'), path.join(dir, 'libkrunfw.so.5'))
    delete process.env.LD_LIBRARY_PATH
    const p = useLibkrun(path.join(dir, 'libkrun.so.1'))
    expect(p.libkrunfw.loadable).toBe(false)
    const err = await refusal()
    expect(err.code).toBe('S311')
    expect(err.message).toContain(`libkrunfw.so.5 does not load by name`)
    expect(err.message).toContain(path.join(dir, 'libkrunfw.so.5'))
    expect(doctorReport(p)).toContain('libkrunfw.so.5 does not load by name')
  })
})

describe('boot errors', () => {
  // Each krun_* call the shim makes, failing with an errno libkrun could return.
  const failures: [string, number][] = [
    ['krun_set_log_level', -22],
    ['krun_create_ctx', -12],
    ['krun_set_vm_config', -22],
    ['krun_set_root', -2],
    ['krun_add_virtiofs3', -2],
    ['krun_set_exec', -22],
    ['krun_disable_implicit_vsock', -22],
    ['krun_add_vsock', -17],
    ['krun_add_vsock_port2', -17],
    ['krun_set_console_output', -13],
    ['krun_start_enter', -6],
  ]
  it.each(failures)(
    '%s returning %i → a failed sandbox with S310, the call, errno and stderr tail, nothing left',
    async (name, rc) => {
      process.env.KRUN_DOUBLE_FAIL = `${name}:${rc}`
      const { sb, err } = await createFailing({})
      expect(err.code).toBe('S310')
      expect(err.details).toMatchObject({
        stage: name.slice('krun_'.length),
        call: name,
        errno: -rc,
        errnoName: errnoName(-rc),
      })
      expect(err.details!.stderrTail).toContain(`krun-shim: ${name} failed`)
      expect(err.message).toContain(`krun-shim: ${name} failed`)
      const calls = readDoubleLog(log)
      expect(calls.at(-1)).toMatchObject({ call: name, rc, injected: true })
      await expectNothingLeft(sb.id)
    },
  )

  it('a libkrun that is gone at boot time (the probe ran earlier) → S311 from dlopen', async () => {
    process.env.KRUNBOX_LIBKRUN_PATH = path.join(tmp.dir, 'nonexistent', 'libkrun.so.1')
    const { sb, err } = await createFailing({})
    expect(err.code).toBe('S311')
    expect(err.details).toMatchObject({ stage: 'dlopen', call: 'dlopen' })
    expect(err.message).toContain(path.join(tmp.dir, 'nonexistent', 'libkrun.so.1'))
    expect(err.details!.stderrTail).toContain('krun-shim: dlopen failed')
    await expectNothingLeft(sb.id)
  })

  it('a control socket path libkrun could not bind (over 107 bytes) is refused at create with S103 naming the path and the limit; nothing boots', async () => {
    const longState = path.join(tmp.dir, 'l'.repeat(100))
    const long = new Runtime({ stateDir: longState, cacheDir: SHARED_CACHE })
    try {
      const t0 = performance.now()
      const err = await long.create({ driver: 'krun' }).then(
        () => null,
        (e: unknown) => e as SandboxError,
      )
      expect(performance.now() - t0).toBeLessThan(2000)
      expect(err).toBeInstanceOf(SandboxError)
      expect(err!.code).toBe('S103')
      expect(err!.message).toMatch(
        new RegExp(
          `the krun control socket ${longState}/[0-9a-f-]{36}/ctl/agent\\.sock is \\d+ bytes long, and a unix socket path holds at most 107`,
        ),
      )
      expect(readDoubleLog(log).filter((c) => c.call === 'krun_start_enter')).toEqual([])
      expect(fs.readdirSync(longState).filter((n) => !n.startsWith('.'))).toEqual([])
    } finally {
      await long.close()
    }
  })

  it('cpus above what the guest kernel runs (16, CONFIG_NR_CPUS of libkrunfw 5) is S003 for the krun driver', async () => {
    const err = await rt.create({ driver: 'krun', cpus: 17 }).then(
      () => null,
      (e: unknown) => e as SandboxError,
    )
    expect(err).toBeInstanceOf(SandboxError)
    expect(err!.code).toBe('S003')
    expect(err!.message).toContain('cpus must be at most 16 with the krun driver')
    expect(err!.message).toContain('CONFIG_NR_CPUS=16')
    expect(err!.message).toContain('got 17')
  })

  it('a library that is not libkrun → S311 naming the missing symbol', async () => {
    process.env.KRUNBOX_LIBKRUN_PATH = 'libm.so.6'
    const { sb, err } = await createFailing({})
    expect(err.code).toBe('S311')
    expect(err.details).toMatchObject({ stage: 'dlsym', call: 'krun_set_log_level' })
    expect(err.message).toContain('does not export krun_set_log_level')
    await expectNothingLeft(sb.id)
  })

  it('with a fresh probe, a missing libkrun is refused before any boot (S311 naming the library)', async () => {
    const missing = path.join(tmp.dir, 'nonexistent', 'libkrun.so.1')
    process.env.KRUNBOX_LIBKRUN_PATH = missing
    hostProbe({ refresh: true })
    try {
      const t0 = performance.now()
      const err = await refusal()
      expect(performance.now() - t0).toBeLessThan(1000)
      expect(err.code).toBe('S311')
      expect(err.message).toContain(missing)
      expect(readDoubleLog(log)).toEqual([])
    } finally {
      useDouble()
      hostProbe({ refresh: true })
    }
  })

  it.skipIf(doubleCannotBoot !== null).each(['silent', 'reset'])(
    'a VM whose agent never says hello (%s socket) fails with S305 at the deadline',
    async (mode) => {
      process.env.KRUN_DOUBLE_ENTER = `exec node ${path.join(fixtures, 'krun-fake-vm.mjs')} ${mode}`
      const { sb, err, ms } = await createFailing({ bootTimeoutMs: 1500 })
      expect(err.code).toBe('S305')
      expect(err.message).toContain('did not answer')
      expect(ms).toBeGreaterThanOrEqual(1400)
      expect(ms).toBeLessThan(4000)
      expect(readDoubleLog(log).at(-1)).toMatchObject({ call: 'krun_start_enter', rc: 0 })
      await expectNothingLeft(sb.id)
    },
  )

  it.skipIf(doubleCannotBoot !== null)(
    'an agent that answers but refuses the handshake → S305 from the runtime, nothing left',
    async () => {
      process.env.KRUN_DOUBLE_ENTER = `exec node ${path.join(fixtures, 'krun-fake-vm.mjs')} refuse`
      const { sb, err, ms } = await createFailing({ bootTimeoutMs: 5000 })
      expect(err.code).toBe('S305')
      expect(err.message).toContain('did not complete the handshake')
      expect((err.cause as SandboxError).code).toBe('S202')
      expect(ms).toBeLessThan(4000) // a refusal is an answer: no waiting for the deadline
      await expectNothingLeft(sb.id)
    },
  )

  it.skipIf(doubleCannotBoot !== null)(
    'a libkrun without its init blob met at boot (the probe ran earlier) → the shim says so by name, not an unexplained S300',
    async () => {
      process.env.KRUN_DOUBLE_NO_INIT_BLOB = '1'
      const { sb, err } = await createFailing({})
      expect(err.code).toBe('S310')
      expect(err.details).toMatchObject({ stage: 'has_feature', call: 'krun_has_feature' })
      expect(err.message).toContain('built without its init blob')
      expect(err.message).toContain('/init.krun')
      await expectNothingLeft(sb.id)
    },
  )

  it.skipIf(doubleCannotBoot !== null)(
    'a shim that exits without a report (the guest ended) → S300 with the exit code',
    async () => {
      delete process.env.KRUN_DOUBLE_ENTER
      process.env.KRUN_DOUBLE_EXIT = '126'
      const { sb, err } = await createFailing({})
      expect(err.code).toBe('S300')
      expect(err.details).toMatchObject({ exitCode: 126, signal: null })
      expect(err.message).toContain('exit code 126')
      await expectNothingLeft(sb.id)
    },
  )
})

describe.skipIf(doubleCannotBoot !== null)(bootTitle('the shim process'), () => {
  it('leaks no file descriptor into the VM process', async () => {
    const out = path.join(tmp.dir, `fds-${runs}.txt`)
    fs.writeFileSync(out, '', { mode: 0o666 })
    fs.chmodSync(out, 0o666)
    // The program krun_start_enter runs in the shim's process lists the descriptors it got.
    process.env.KRUN_DOUBLE_ENTER = `exec ls -l /proc/self/fd > ${out}`
    const { sb, err } = await createFailing({})
    expect(err.code).toBe('S300')
    expect(err.details).toMatchObject({ exitCode: 0 })
    const listing = fs.readFileSync(out, 'utf8')
    expect(fdsFromLsOutput(listing)).toEqual([0, 1, 2])
    expect(listing).toMatch(/ 0 -> \/dev\/null/)
    // The guest's output is the guest console, which krun_set_console_output sends to a file.
    expect(listing).toContain(` 2 -> ${shimSees(path.join(stateDir, sb.id, 'console.log'), 4)}`)
    await expectNothingLeft(sb.id)
  })

  /** Starts krun-host-child.ts; resolves with its sandbox once ready, and the host's exit. */
  async function hostWithSandbox(childState: string, ...extra: string[]) {
    const host = spawn(
      process.execPath,
      ['--import', TSX_LOADER, path.join(fixtures, 'krun-host-child.ts'), childState, SHARED_CACHE, ...extra],
      {
        env: process.env,
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    )
    const exited = new Promise((resolve) => host.once('exit', resolve))
    const firstLine = await new Promise<string>((resolve, reject) => {
      readline.createInterface({ input: host.stdout! }).once('line', resolve)
      host.once('exit', (code) => reject(new Error(`host child exited with ${code} before its sandbox was ready`)))
    })
    return { host, exited, ...(JSON.parse(firstLine) as { id: string; pid: number }) }
  }

  it('dies with its host process, and the next runtime sweeps what is left', async () => {
    const childState = path.join(tmp.dir, 'child-state')
    const { host, exited, id, pid } = await hostWithSandbox(childState)
    expect(isAlive(pid)).toBe(true)
    const guest = descendants(pid)
    expect(guest.length).toBeGreaterThan(0) // the guest's PID 1 (the agent) and its helpers

    host.kill('SIGKILL')
    await exited
    // Gone from /proc entirely (reaped), as the next runtime's sweep requires; the guest with it.
    expect(await until(() => !fs.existsSync(`/proc/${pid}`) && processesMentioning(id).length === 0, 5000)).toBe(true)
    expect(await until(() => guest.every((p) => !isAlive(p)), 5000)).toBe(true)

    const next = new Runtime({ stateDir: childState, cacheDir: SHARED_CACHE })
    await next.close()
    expect(fs.readdirSync(childState).filter((n) => !n.startsWith('.'))).toEqual([])
    for (const dir of [`memory/krunbox/${id}`, `pids/krunbox/${id}`, `cpu/krunbox/${id}`, `krunbox/${id}`]) {
      expect(fs.existsSync(`/sys/fs/cgroup/${dir}`)).toBe(false)
    }
  })

  it('with artifacts, outlives a SIGKILLed host until it has archived them (the reaper asks), then ends', async () => {
    const childState = path.join(tmp.dir, 'child-state-artifacts')
    const to = path.join(tmp.dir, 'artifacts')
    const { host, exited, id } = await hostWithSandbox(childState, to)
    host.kill('SIGKILL')
    await exited
    const history = path.join(childState, '.history', `${id}.json`)
    await expect.poll(() => fs.existsSync(history), { timeout: 30_000, interval: 100 }).toBe(true)
    expect(JSON.parse(fs.readFileSync(history, 'utf8')).reason).toBe('host_exit')
    const manifest = JSON.parse(fs.readFileSync(path.join(to, `${id}.json`), 'utf8'))
    expect(manifest.error ?? null).toBeNull()
    const listed = execFileSync('tar', ['-tf', path.join(to, `${id}.tar`)], { encoding: 'utf8' })
      .trim()
      .split('\n')
      .sort()
    expect(listed).toEqual(['workspace/out/', 'workspace/out/result.txt'])
    expect(await until(() => processesMentioning(id).length === 0, 15_000)).toBe(true)
  }, 60_000)
})

function digest(file: string): string {
  return crypto.createHash('sha256').update(fs.readFileSync(file)).digest('hex')
}
