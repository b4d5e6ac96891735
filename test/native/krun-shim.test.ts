import { execFileSync } from 'node:child_process'
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, writeFileSync } from 'node:fs'
import net from 'node:net'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

import {
  KRUN_IMAGE_TAG,
  KRUN_SHIM_BOOT_ERROR_EXIT,
  krunShimBootErrorToSandboxError,
  parseKrunShimBootError,
  type KrunShimConfig,
} from '../../lib/drivers/krun-shim-codec.js'
import { krunShimPath, spawn, waitForExit } from '../../lib/native.js'
import { doubleEnv, libkrunDoublePath, readDoubleLog, type DoubleCall } from '../fixtures/libkrun-double/index.js'
import { ensureNativeBuilt, fdsFromLsOutput, makeTempDir, processState, until } from './helpers.js'

// Created at collection time: the it.each tables below build configs from it.
const tmp = makeTempDir('krunbox-shim-')
mkdirSync(join(tmp.dir, 'boot'))
mkdirSync(join(tmp.dir, 'image'))
let runs = 0

beforeAll(() => ensureNativeBuilt())
afterAll(() => tmp.cleanup())

function baseConfig(): KrunShimConfig {
  runs++
  return {
    libkrunPath: libkrunDoublePath,
    cpus: 2,
    memoryMib: 512,
    rootDir: join(tmp.dir, 'boot'),
    imageDir: join(tmp.dir, 'image'),
    agentPath: '/krunbox-agent',
    agentArgs: ['--vsock-port', '1024'],
    env: ['HOME=/root', 'TERM=dumb'],
    vsockPort: 1024,
    socketPath: join(tmp.dir, `agent-${runs}.sock`),
  }
}

interface ShimRun {
  exitCode: number | null
  signal: string | null
  bootError: string
  stderr: string
  calls: DoubleCall[]
}

/** Runs krun-shim against the libkrun double: config on fd 3, boot errors to a file on fd 4. */
async function runShim(options: {
  config: KrunShimConfig | string
  fail?: string
  enter?: string
  exit?: number
  moreFds?: number[]
  extraEnv?: string[]
}): Promise<ShimRun> {
  const n = ++runs
  const configPath = join(tmp.dir, `config-${n}.json`)
  const bootPath = join(tmp.dir, `boot-error-${n}.jsonl`)
  const log = join(tmp.dir, `calls-${n}.jsonl`)
  writeFileSync(configPath, typeof options.config === 'string' ? options.config : JSON.stringify(options.config))
  const configFd = openSync(configPath, 'r')
  const bootFd = openSync(bootPath, 'w')
  let child
  try {
    child = spawn({
      file: krunShimPath(),
      env: doubleEnv({ log, fail: options.fail, enter: options.enter, exit: options.exit, extra: options.extraEnv }),
      extraFds: [configFd, bootFd, ...(options.moreFds ?? [])],
      createPipes: { stderr: true },
    })
  } finally {
    closeSync(configFd)
    closeSync(bootFd)
  }
  const stderrSocket = new net.Socket({ fd: child.stderrFd!, readable: true, writable: false })
  let stderr = ''
  stderrSocket.on('data', (chunk) => (stderr += chunk))
  const stderrDone = new Promise((r) => stderrSocket.on('close', r))
  const status = await waitForExit(child.pid)
  await stderrDone
  return { ...status, bootError: readFileSync(bootPath, 'utf8'), stderr, calls: readDoubleLog(log) }
}

const callNames = (calls: DoubleCall[]) => calls.map((c) => c.call)

describe("libkrun's warnings reach the shim's stderr (issue 30)", () => {
  // A socket path over 107 bytes: libkrun's muxer cannot bind it and says so only as a warning
  // (muxer_thread.rs:158-163). The guest program is missing, so the "VM" ends at once (127).
  const longSocket = () => join(tmp.dir, `${'x'.repeat(110)}.sock`)
  const warning = /WARN .*Failed to create listening proxy at ".*x{110}\.sock": CreatingSocket\(ENAMETOOLONG\)/

  it.each([
    ['logLevel 2', 2, [] as string[], true],
    ['logLevel 1', 1, [] as string[], false],
    ['logLevel 1 with RUST_LOG=warn', 1, ['RUST_LOG=warn'], true],
  ])('%s: the bind warning is %s shown', async (_name, logLevel, extraEnv, shown) => {
    const run = await runShim({ config: { ...baseConfig(), logLevel, socketPath: longSocket() }, extraEnv })
    expect(run.calls.find((c) => c.call === 'krun_set_log_level')).toMatchObject({ level: logLevel, warnings: shown })
    if (shown) expect(run.stderr).toMatch(warning)
    else expect(run.stderr).not.toMatch(warning)
  })
})

describe('krun-shim against the libkrun double', () => {
  it('reads its config from fd 3 and configures the VM call by call', async () => {
    const config = { ...baseConfig(), consoleOutput: join(tmp.dir, 'console.log') }
    const run = await runShim({ config, exit: 7 })
    // libkrun exit()s with the guest's status; the double does the same with KRUN_DOUBLE_EXIT.
    expect(run).toMatchObject({ exitCode: 7, signal: null, bootError: '' })
    expect(callNames(run.calls)).toEqual([
      'krun_set_log_level',
      'krun_create_ctx',
      'krun_has_feature', // the init blob (/init.krun) is there
      'krun_set_vm_config',
      'krun_set_root',
      'krun_add_virtiofs3',
      'krun_set_exec',
      'krun_disable_implicit_vsock',
      'krun_add_vsock',
      'krun_add_vsock_port2',
      'krun_set_console_output',
      'krun_start_enter',
    ])
    const ctx = run.calls[1].rc
    expect(run.calls.every((c) => ['krun_set_log_level', 'krun_create_ctx', 'krun_has_feature'].includes(c.call) || c.ctx === ctx)).toBe(true)
    const byName = Object.fromEntries(run.calls.map((c) => [c.call, c]))
    expect(byName.krun_set_log_level).toMatchObject({ level: 1 })
    expect(byName.krun_set_vm_config).toMatchObject({ num_vcpus: 2, ram_mib: 512, rc: 0 })
    expect(byName.krun_set_root).toMatchObject({ root_path: config.rootDir })
    expect(byName.krun_add_virtiofs3).toMatchObject({ c_tag: KRUN_IMAGE_TAG, c_path: config.imageDir, read_only: true })
    expect(byName.krun_set_exec).toMatchObject({
      exec_path: '/krunbox-agent',
      argv: ['--vsock-port', '1024'],
      envp: ['HOME=/root', 'TERM=dumb'],
    })
    expect(byName.krun_add_vsock).toMatchObject({ tsi_features: 0 })
    expect(byName.krun_add_vsock_port2).toMatchObject({ port: 1024, c_filepath: config.socketPath, listen: true })
    expect(byName.krun_set_console_output).toMatchObject({ c_filepath: config.consoleOutput })
  })

  it('keeps libkrun\'s implicit vsock (TSI networking) only when network is true', async () => {
    const run = await runShim({ config: { ...baseConfig(), network: true, imageDir: undefined }, exit: 0 })
    expect(run.exitCode).toBe(0)
    expect(callNames(run.calls)).not.toContain('krun_disable_implicit_vsock')
    expect(callNames(run.calls)).not.toContain('krun_add_vsock')
    expect(callNames(run.calls)).not.toContain('krun_add_virtiofs3')
    expect(callNames(run.calls)).toContain('krun_add_vsock_port2')
  })

  it.each([
    ['krun_create_ctx', -12, 'create_ctx'],
    ['krun_set_vm_config', -22, 'set_vm_config'],
    ['krun_set_root', -2, 'set_root'],
    ['krun_add_virtiofs3', -13, 'add_virtiofs3'],
    ['krun_set_exec', -7, 'set_exec'],
    ['krun_disable_implicit_vsock', -95, 'disable_implicit_vsock'],
    ['krun_add_vsock_port2', -98, 'add_vsock_port2'],
    ['krun_start_enter', -22, 'start_enter'],
  ])('reports an injected %s failure (%i) as a boot error at stage %s', async (call, rc, stage) => {
    const run = await runShim({ config: baseConfig(), fail: `${call}:${rc}` })
    expect(run.exitCode).toBe(KRUN_SHIM_BOOT_ERROR_EXIT)
    const report = parseKrunShimBootError(run.bootError)
    expect(report).toMatchObject({ stage, call, errno: -rc })
    expect(report!.message).toContain(`returned ${rc}`)
    expect(run.stderr).toContain(`krun-shim: ${call} failed`)
    // nothing after the failing call
    expect(run.calls.at(-1)).toMatchObject({ call, rc, injected: true })
    const error = krunShimBootErrorToSandboxError(report!)
    expect(error.code).toBe('S310')
    expect(error.details).toMatchObject({ stage, call, errno: -rc })
  })

  it('surfaces libkrun\'s own refusal: the listen socket path already exists (EEXIST)', async () => {
    const config = baseConfig()
    writeFileSync(config.socketPath, '')
    const run = await runShim({ config })
    expect(parseKrunShimBootError(run.bootError)).toMatchObject({ stage: 'add_vsock_port2', call: 'krun_add_vsock_port2', errno: 17 })
    expect(run.calls.at(-1)).toMatchObject({ call: 'krun_add_vsock_port2', rc: -17 })
  })

  it('reports a missing libkrun at the dlopen stage (S311)', async () => {
    const run = await runShim({ config: { ...baseConfig(), libkrunPath: join(tmp.dir, 'no', 'libkrun.so.1') } })
    expect(run.exitCode).toBe(KRUN_SHIM_BOOT_ERROR_EXIT)
    const report = parseKrunShimBootError(run.bootError)!
    expect(report).toMatchObject({ stage: 'dlopen', call: 'dlopen', errno: 2 })
    expect(report.message).toContain(join(tmp.dir, 'no', 'libkrun.so.1'))
    expect(run.calls).toEqual([])
    expect(krunShimBootErrorToSandboxError(report).code).toBe('S311')
  })

  it('reports a library without the libkrun API at the dlsym stage (S311)', async () => {
    const run = await runShim({ config: { ...baseConfig(), libkrunPath: 'libc.so.6' } })
    const report = parseKrunShimBootError(run.bootError)!
    expect(report).toMatchObject({ stage: 'dlsym', call: 'krun_set_log_level', errno: 38 })
    expect(krunShimBootErrorToSandboxError(report).code).toBe('S311')
  })

  it.each([
    ['not JSON', 'cpus=2', /not valid JSON: expected '\{' at byte 0/],
    ['an unknown key', JSON.stringify({ ...baseConfig(), cpu: 2 }), /unknown config key "cpu"/],
    ['a missing key', JSON.stringify({ ...baseConfig(), socketPath: undefined }), /"socketPath" is required/],
    ['a value out of range', JSON.stringify({ ...baseConfig(), cpus: 256 }), /"cpus" must be in 1\.\.25[45], got 256/],
    ['a wrong type', JSON.stringify({ ...baseConfig(), network: 'no' }), /"network" must be a boolean, got a string/],
    ['a relative path', JSON.stringify({ ...baseConfig(), rootDir: 'boot' }), /"rootDir" must be an absolute path, got "boot"/],
    ['a NUL character', JSON.stringify({ ...baseConfig(), agentPath: 'a\u0000b' }), /NUL character in string/],
    ['a fraction', JSON.stringify({ ...baseConfig(), memoryMib: 1.5 }), /only integers are accepted/],
    ['a duplicate key', JSON.stringify(baseConfig()).replace('{', '{"cpus":1,'), /duplicate key/],
    ['a bad env entry', JSON.stringify({ ...baseConfig(), env: ['NOEQUALS'] }), /env\[0\] must look like KEY=VALUE/],
    [
      'one map helper without the other',
      JSON.stringify({ ...baseConfig(), uidMap: ['0 1000 1'], gidMap: ['0 1000 1'], newuidmap: '/usr/bin/newuidmap' }),
      /"newuidmap" and "newgidmap" go together/,
    ],
    [
      'map helpers without maps',
      JSON.stringify({ ...baseConfig(), newuidmap: '/usr/bin/newuidmap', newgidmap: '/usr/bin/newgidmap' }),
      /and with "uidMap"/,
    ],
  ])('rejects a config with %s at the config stage (S103)', async (_what, text, message) => {
    const run = await runShim({ config: text })
    expect(run.exitCode).toBe(KRUN_SHIM_BOOT_ERROR_EXIT)
    const report = parseKrunShimBootError(run.bootError)!
    expect(report).toMatchObject({ stage: 'config', call: null, errno: 22 })
    expect(report.message).toMatch(message)
    expect(run.calls).toEqual([])
    expect(krunShimBootErrorToSandboxError(report).code).toBe('S103')
  })

  it('decodes JSON escapes, including surrogate pairs, before handing strings to libkrun', async () => {
    const text = JSON.stringify(baseConfig()).replace(/"rootDir":"[^"]*"/, `"rootDir":"${tmp.dir}/caf\\u00e9 \\ud83d\\ude00 \\"q\\" \\\\ \\t"`)
    const run = await runShim({ config: text, exit: 0 })
    expect(run.exitCode).toBe(0)
    expect(run.calls.find((c) => c.call === 'krun_set_root')!.root_path).toBe(`${tmp.dir}/café 😀 "q" \\ \t`)
  })

  it.each([
    ['a space', 'A=hello world', /contains a space/],
    ['a quote', 'A=say"hi', /contains a '"'/],
    ['non-ASCII text', 'A=grüße', /non-ASCII byte \(libkrun aborts the VM on it\)/],
    ['a module-parameter name', 'a.b=c', /its name is not/],
  ])('refuses an env entry with %s before any libkrun call (S310 naming the entry)', async (_what, entry, why) => {
    const run = await runShim({ config: { ...baseConfig(), env: ['OK=1', entry] } })
    const report = parseKrunShimBootError(run.bootError)!
    expect(report).toMatchObject({ stage: 'set_exec', call: 'krun_set_exec', errno: 22 })
    expect(report.message).toContain(`env[1] "${entry}"`)
    expect(report.message).toMatch(why)
    expect(run.calls).toEqual([])
    expect(krunShimBootErrorToSandboxError(report).code).toBe('S310')
  })

  it('refuses an env that would not fit in what the guest keeps of its command line', async () => {
    const run = await runShim({ config: { ...baseConfig(), env: [`BIG=${'x'.repeat(1100)}`] } })
    expect(parseKrunShimBootError(run.bootError)!.message).toMatch(/at most 1024 fit/)
  })

  it.each([
    ['KRUN_INIT_PID1=1', '1'],
    ['KRUN_INIT_PID0=1', '2'],
  ])('runs the guest program as PID 1 only with KRUN_INIT_PID1=1 (libkrun init.krun): %s → pid %s', async (entry, pid) => {
    const out = join(tmp.dir, `pid-${runs}.txt`)
    const run = await runShim({ config: { ...baseConfig(), env: [entry] }, enter: `echo $$ > '${out}'` })
    expect(run.exitCode).toBe(0)
    expect(readFileSync(out, 'utf8').trim()).toBe(pid)
    expect(run.calls[1]).toMatchObject({ call: 'krun_create_ctx', rc: 0, libkrunfw: true })
  })

  it('ends when the guest restarts, and hangs like libkrun\'s VMM when it powers off', async () => {
    // reboot(2) on x86_64 is syscall 169; the double runs the guest as PID 1 of its own PID namespace.
    const reboot = (cmd: string) => `exec perl -e 'syscall(169, 0xfee1dead, 672274793, ${cmd}, 0)'`
    const restart = await runShim({ config: { ...baseConfig(), env: ['KRUN_INIT_PID1=1'] }, enter: reboot('0x01234567') })
    expect(restart.signal).toBeNull()
    const configPath = join(tmp.dir, 'poweroff-config.json')
    writeFileSync(configPath, JSON.stringify({ ...baseConfig(), env: ['KRUN_INIT_PID1=1'] }))
    const configFd = openSync(configPath, 'r')
    const child = spawn({ file: krunShimPath(), env: doubleEnv({ log: join(tmp.dir, 'poweroff.jsonl'), enter: reboot('0x4321FEDC') }), extraFds: [configFd] })
    closeSync(configFd)
    const exit = waitForExit(child.pid)
    const started = () => existsSync(join(tmp.dir, 'poweroff.jsonl')) && readFileSync(join(tmp.dir, 'poweroff.jsonl'), 'utf8').includes('krun_start_enter')
    expect(await until(started, 5000)).toBe(true)
    expect(await Promise.race([exit.then(() => 'exited'), new Promise((r) => setTimeout(r, 1000, 'running'))])).toBe('running')
    process.kill(child.pid, 'SIGKILL')
    expect((await exit).signal).toBe('SIGKILL')
  })

  it('reports an empty config (fd 3 at EOF at once) at the config stage', async () => {
    const bootPath = join(tmp.dir, 'empty-config-boot.jsonl')
    const bootFd = openSync(bootPath, 'w')
    const devnull = openSync('/dev/null', 'r')
    const child = spawn({ file: krunShimPath(), env: [], extraFds: [devnull, bootFd] })
    closeSync(bootFd)
    closeSync(devnull)
    expect((await waitForExit(child.pid)).exitCode).toBe(KRUN_SHIM_BOOT_ERROR_EXIT)
    expect(parseKrunShimBootError(readFileSync(bootPath, 'utf8'))).toMatchObject({ stage: 'config', message: expect.stringMatching(/expected '\{'/) })
  })

  it('hands the agent env, args, boot dir and vsock socket to the KRUN_DOUBLE_ENTER command', async () => {
    const out = join(tmp.dir, 'enter-env.txt')
    const config = baseConfig()
    const enter = `printf '%s\\n' "$KRUN_DOUBLE_VSOCK_PATH" "$KRUN_DOUBLE_VSOCK_PORT" "$HOME" "$KRUN_DOUBLE_NETWORK" "$KRUN_DOUBLE_ROOT" "$KRUN_DOUBLE_EXEC_PATH" "$KRUN_DOUBLE_IMAGE" "$@" > '${out}'`
    const run = await runShim({ config, enter })
    expect(run.exitCode).toBe(0)
    expect(readFileSync(out, 'utf8').split('\n').slice(0, -1)).toEqual([
      config.socketPath,
      '1024',
      '/root',
      'none',
      config.rootDir,
      '/krunbox-agent',
      config.imageDir,
      '--vsock-port',
      '1024',
    ])
  })

  it('passes no host descriptor into the VM process', async () => {
    const listing = join(tmp.dir, 'vm-fds.txt')
    const stray = openSync(join(tmp.dir, 'stray.txt'), 'w')
    try {
      // the stray fds arrive as the shim's fds 5 and 6
      const run = await runShim({ config: baseConfig(), enter: `ls -l /proc/self/fd > '${listing}'`, moreFds: [stray, stray] })
      expect(run.exitCode).toBe(0)
    } finally {
      closeSync(stray)
    }
    expect(fdsFromLsOutput(readFileSync(listing, 'utf8'))).toEqual([0, 1, 2])
  })

  it('dies with its parent when the spawner asks (PR_SET_PDEATHSIG survives exec), outlives it when detached', async () => {
    const configPath = join(tmp.dir, 'orphan-config.json')
    writeFileSync(configPath, JSON.stringify(baseConfig()))
    const fixture = join(import.meta.dirname, 'fixtures', 'orphan-parent.cjs')
    const spawnOrphan = (parentDeathSignal?: number) => {
      const spec = {
        file: krunShimPath(),
        args: [],
        env: doubleEnv({ log: join(tmp.dir, 'orphan-calls.jsonl'), enter: 'exec sleep 30' }),
        configPath,
        parentDeathSignal,
      }
      return Number(execFileSync(process.execPath, [fixture, JSON.stringify(spec)], { encoding: 'utf8', timeout: 20_000 }))
    }
    const isGone = (pid: number) => () => {
      const state = processState(pid)
      return state === null || state === 'Z'
    }
    const tied = spawnOrphan(9) // SIGKILL; the raw addon takes numbers
    expect(await until(isGone(tied), 5000)).toBe(true)
    const detached = spawnOrphan()
    try {
      expect(await until(isGone(detached), 500)).toBe(false)
    } finally {
      try {
        process.kill(detached, 'SIGKILL')
      } catch {}
    }
  })

  it('is built next to the addon', () => {
    expect(existsSync(krunShimPath())).toBe(true)
  })
})
