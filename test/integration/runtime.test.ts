/** The runtime — allowlist, caps, limits, lifecycle, reaping, attach, pause, metadata, telemetry. (Issue 5.) */
import { execFile, spawn } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import { Runtime, runtimeState } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import type { SandboxStatus } from '../../lib/sandbox-status.js'
import { processesLeft, processesMentioning, sleep, runtimesClosedAfterAll } from '../helpers/runtime.js'
import { until } from '../native/helpers.js'
import { checkoutUnreachable } from '../helpers/rootless.js'

const runtime = runtimesClosedAfterAll()

async function codeOf(p: unknown): Promise<string> {
  try {
    await (typeof p === 'function' ? p() : p)
  } catch (e) {
    expect(e).toBeInstanceOf(SandboxError)
    return (e as SandboxError).code
  }
  return 'no error'
}

const CHILD = path.resolve('test/fixtures/runtime-child.ts')
// node --import tsx (not the tsx wrapper, which would put a second process between us and the child)
const NODE_TSX = [process.execPath, '--import', 'tsx']

function child(args: string[], options: { uid?: number } = {}): Promise<Record<string, unknown>> {
  const command = [...NODE_TSX, CHILD, ...args]
  const [file, argv] =
    options.uid === undefined
      ? [command[0], command.slice(1)]
      : ['setpriv', ['--reuid', String(options.uid), '--regid', String(options.uid), '--clear-groups', ...command]]
  return new Promise((resolve, reject) => {
    execFile(file, argv, { timeout: 30_000, env: { ...process.env, HOME: '/tmp' } }, (err, stdout) => {
      const line = stdout.trim().split('\n').pop() ?? ''
      try {
        resolve(JSON.parse(line))
      } catch {
        reject(err ?? new Error(`child printed ${stdout}`))
      }
    })
  })
}

describe('configuration: allowlist, custom images, caps', () => {
  it('an empty allowlist denies every image (S100); a list admits only its entries', async () => {
    expect(await codeOf(runtime({ imageAllowlist: [] }).create({ image: 'base' }))).toBe('S100')
    const rt = runtime({ imageAllowlist: ['base'] })
    expect(await codeOf(rt.create({ image: 'python' }))).toBe('S100')
    const sb = await rt.create({ image: 'base' })
    expect(sb.status).toBe('ready')
  })

  it('refuses custom images that shadow presets when the config is loaded (S107), and unlisted custom images (S100)', async () => {
    expect(await codeOf(() => new Runtime({ customImages: { python: '/tmp' } }))).toBe('S107')
    const rt = runtime({ customImages: { mine: '/nonexistent-dir' }, imageAllowlist: ['base'] })
    expect(await codeOf(rt.create({ image: 'mine' }))).toBe('S100')
    const listed = runtime({ customImages: { mine: '/nonexistent-dir' }, imageAllowlist: ['mine'] })
    expect(await codeOf(listed.create({ image: 'mine' }))).toBe('S104')
  })

  it('enforces per-image caps (S400) and the TTL maximum (S402)', async () => {
    const rt = runtime({ perImageCaps: { base: { maxCpus: 2, maxMemoryMb: 256 } }, maxTtlMs: 60_000 })
    expect(await codeOf(rt.create({ cpus: 3 }))).toBe('S400')
    expect(await codeOf(rt.create({ memoryMb: 512 }))).toBe('S400')
    expect(await codeOf(rt.create({ ttlMs: 60_001 }))).toBe('S402')
    const ok = await rt.create({ cpus: 2, memoryMb: 256, ttlMs: 60_000 })
    expect(ok.expiresAt).toBeGreaterThan(Date.now())
  })
})

describe('concurrency limit', () => {
  it('32 creates in parallel succeed; the 33rd fails with S401, or waits with queue: true', async () => {
    const rt = runtime()
    const boxes = await Promise.all(Array.from({ length: 32 }, () => rt.create()))
    expect(new Set(boxes.map((b) => b.id)).size).toBe(32)
    expect(await codeOf(rt.create())).toBe('S401')
    await Promise.all(boxes.map((b) => b.stop()))

    const queued = runtime({ maxConcurrentSandboxes: 2, queue: true })
    const a = await queued.create()
    await queued.create()
    let third: Sandbox | null = null
    const pending = queued.create().then((s) => (third = s))
    await sleep(300)
    expect(third).toBeNull()
    await a.stop()
    await pending
    expect(third!.status).toBe('ready')
  }, 120_000)
})

describe('lifecycle', () => {
  it('observes every status transition in order', async () => {
    const rt = runtime()
    const sb = await rt.create({ wait: false })
    const seen: SandboxStatus[] = [sb.status]
    sb.on('status', (s) => seen.push(s))
    await sb.ready()
    await sb.exec('true')
    await sb.pause()
    await sb.resume()
    await sb.stop()
    expect(seen).toEqual(['creating', 'starting', 'ready', 'running', 'idle', 'paused', 'ready', 'idle', 'destroyed'])
    expect(sb.destroyedReason).toBe('user_killed')
  })

  it('a failed boot ends in failed with the error and its stderr tail', async () => {
    const rt = runtime()
    // An agent binary that cannot start inside the sandbox (a dynamically linked program with
    // no loader there): the sandbox process fails the way a broken boot does.
    process.env.KRUNBOX_AGENT_PATH = '/bin/true'
    let sb: Sandbox
    try {
      sb = await rt.create({ wait: false })
      const err = await sb.ready().catch((e) => e)
      expect(sb.status).toBe('failed')
      expect(err).toBeInstanceOf(SandboxError)
      expect(err.code).toBe('S300')
      expect(err.details.stderrTail).toMatch(/krunbox\/agent/)
      expect(sb.error).toBe(err)
    } finally {
      delete process.env.KRUNBOX_AGENT_PATH
    }
    expect(await processesLeft(sb.id)).toEqual([])
    expect(fs.existsSync(runtimeState(rt).sandboxDir(sb.id))).toBe(false)
  })

  it('reaps an idle sandbox, but never while a command runs', async () => {
    const rt = runtime()
    const sb = await rt.create({ idleTimeoutMs: 600 })
    const t0 = Date.now()
    await sb.exec('sleep', ['1.2'])
    await sb.waitFor('destroyed', { timeoutMs: 5000 })
    expect(sb.destroyedReason).toBe('idle_expired')
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1700)
    expect(rt.list({ includeHistorical: true }).find((l) => l.id === sb.id)?.destroyedReason).toBe('idle_expired')
  })

  it('ends at its TTL: running commands end killed/sandbox_destroyed', async () => {
    const rt = runtime()
    const sb = await rt.create({ ttlMs: 1000 })
    const cmd = sb.start('sleep', ['30'])
    const r = await cmd.wait()
    expect(r.status).toBe('killed')
    expect(r.killedReason).toBe('sandbox_destroyed')
    await sb.waitFor('destroyed', { timeoutMs: 5000 })
    expect(sb.destroyedReason).toBe('ttl_expired')
  })

  it('injects the sandbox context into every command', async () => {
    const rt = runtime()
    const sb = await rt.create()
    const r = await sb.exec('sh', [
      '-c',
      'echo $KRUNBOX $KRUNBOX_SANDBOX_ID $KRUNBOX_IMAGE $KRUNBOX_IMAGE_VERSION $KRUNBOX_WORKSPACE',
    ])
    expect(r.stdout).toBe(`1 ${sb.id} base ${sb.imageVersion} /workspace\n`)
    expect(sb.imageVersion).toMatch(/^[0-9a-f]{16,}$/)
  })
})

describe('pause and resume', () => {
  it('pause stops progress and suspends timeouts; resume continues', async () => {
    const rt = runtime()
    const sb = await rt.create()
    const counter = sb.start('sh', ['-c', 'i=0; while :; do i=$((i+1)); echo $i > /tmp/c; echo $i; sleep 0.02; done'])
    const counted = () => new Promise((resolve) => counter.once('stdout', resolve))
    await counted()
    const timed = sb.start('sleep', ['30'], { timeoutMs: 3000 })
    await timed.started()
    await sb.pause()
    expect(sb.status).toBe('paused')
    const a = Number((await sb.fs.readFile('/tmp/c')).data.toString())
    await sleep(1500)
    const b = Number((await sb.fs.readFile('/tmp/c')).data.toString())
    expect(b).toBe(a)
    expect(timed.status).toBe('running')
    await sb.resume()
    await counted()
    const c = Number((await sb.fs.readFile('/tmp/c')).data.toString())
    expect(c).toBeGreaterThan(b)
    const r = await timed.wait()
    expect(r.timedOut).toBe(true)
    await counter.cancel({ mode: 'force' })
  })
})

describe('metadata', () => {
  const ok = (n: number, len = 1) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, 'v'.repeat(len)]))
  const cases: Array<[string, string, Record<string, unknown>]> = [
    ['16 keys', 'ok', ok(16)],
    ['17 keys', 'S007', ok(17)],
    ['a 64-character key', 'ok', { ['k'.repeat(64)]: 'v' }],
    ['a 65-character key', 'S007', { ['k'.repeat(65)]: 'v' }],
    ['a 512-character value', 'ok', { k: 'v'.repeat(512) }],
    ['a 513-character value', 'S007', { k: 'v'.repeat(513) }],
    ['4096 bytes in all', 'ok', { ...ok(7, 512), z: 'v'.repeat(4096 - 7 * 514 - 1) }],
    ['4097 bytes in all', 'S007', { ...ok(7, 512), z: 'v'.repeat(4096 - 7 * 514) }],
    ['a key with a space', 'S007', { 'a b': 'v' }],
    ['a non-string value', 'S007', { k: 1 }],
  ]
  it.each(cases)('%s → %s', async (_what, expected, metadata) => {
    const rt = runtime()
    let outcome = 'ok'
    try {
      const sb = await rt.create({ metadata: metadata as Record<string, string> })
      expect(sb.metadata).toEqual(metadata)
      await sb.stop()
    } catch (e) {
      outcome = (e as SandboxError).code
      if (typeof Object.keys(metadata)[0] === 'string') expect((e as Error).message).toMatch(/metadata/)
    }
    expect(outcome).toBe(expected)
  })
})

describe('no daemon: other processes and host death', () => {
  it('attach works from a second process with the token; a wrong or missing token is refused (S005)', async () => {
    const rt = runtime()
    const sb = await rt.create()
    const stateDir = runtimeState(rt).root
    expect((fs.statSync(stateDir).mode & 0o777).toString(8)).toBe('700')
    expect(fs.readFileSync(path.join(stateDir, sb.id, 'state.json'), 'utf8')).not.toContain(sb.accessToken!)
    expect(await child(['attach', stateDir, JSON.stringify({ id: sb.id, accessToken: sb.accessToken })])).toEqual({
      stdout: 'attached\n',
    })
    expect(await child(['attach', stateDir, JSON.stringify({ id: sb.id, accessToken: 'wrong' })])).toEqual({
      code: 'S005',
    })
    expect(await child(['attach', stateDir, JSON.stringify({ id: sb.id })])).toEqual({ code: 'S005' })
    const other = runtime({ stateDir })
    const same = await other.attach(sb.id, { accessToken: sb.accessToken! })
    expect((await same.exec('echo', ['x'])).stdout).toBe('x\n')
    const listed = rt.list().find((l) => l.id === sb.id)!
    expect(listed).toMatchObject({ id: sb.id, image: 'base', execInProgress: false, expiresAt: null })
    expect(listed.ageMs).toBeGreaterThanOrEqual(0)
  })

  // The other user runs the checkout's code, so it must be able to reach it.
  it.skipIf(checkoutUnreachable !== null)("another user's attach with the right token is refused (S005)", async () => {
    const rt = runtime()
    const sb = await rt.create()
    expect(
      await child(['attach', runtimeState(rt).root, JSON.stringify({ id: sb.id, accessToken: sb.accessToken })], {
        uid: 65534,
      }),
    ).toEqual({ code: 'S005' })
  })

  it('sandboxes of a SIGKILLed host die with it; detached ones live on and still end at their TTL', async () => {
    const rt = runtime()
    const stateDir = runtimeState(rt).root
    const start = (opts: object) =>
      new Promise<{ proc: ReturnType<typeof spawn>; info: { id: string; pid: number } }>((resolve, reject) => {
        const proc = spawn(NODE_TSX[0], [...NODE_TSX.slice(1), CHILD, 'create', stateDir, JSON.stringify(opts)], {
          stdio: ['ignore', 'pipe', 'inherit'],
        })
        proc.stdout!.once('data', (d) => resolve({ proc, info: JSON.parse(String(d)) }))
        proc.once('exit', () => reject(new Error('child exited early')))
      })
    const owned = await start({})
    // Long enough to be alive still when both hosts are gone, however loaded the machine.
    const detached = await start({ detached: true, ttlMs: 8000 })
    const hostsGone = [owned, detached].map(({ proc }) => new Promise((resolve) => proc.once('exit', resolve)))
    owned.proc.kill('SIGKILL')
    detached.proc.kill('SIGKILL')
    await Promise.all(hostsGone)
    expect(processesMentioning(detached.info.id).length).toBeGreaterThan(0)
    expect(rt.list().map((l) => l.id)).toContain(detached.info.id)
    expect(await until(() => processesMentioning(owned.info.id).length === 0, 10_000)).toBe(true)
    expect(await until(() => processesMentioning(detached.info.id).length === 0, 20_000)).toBe(true)
    // The reaper names no sandbox on its command line: its end is the entries going.
    const gone = (id: string) => !fs.existsSync(path.join(stateDir, id))
    expect(await until(() => gone(owned.info.id) && gone(detached.info.id), 10_000)).toBe(true)
    const fresh = runtime({ stateDir })
    const history = fresh.list({ includeHistorical: true })
    expect(history.find((h) => h.id === detached.info.id)?.destroyedReason).toBe('ttl_expired')
    expect(history.find((h) => h.id === owned.info.id)?.destroyedReason).toBe('host_exit')
  }, 60_000)
})

describe('whoever ends a sandbox removes what it had on the host (issue 21 item 10)', () => {
  /** A sandbox made by a second host process, which is then SIGKILLed. */
  async function orphan(stateDir: string, opts: object): Promise<{ id: string; pid: number }> {
    const proc = spawn(NODE_TSX[0], [...NODE_TSX.slice(1), CHILD, 'create', stateDir, JSON.stringify(opts)], {
      stdio: ['ignore', 'pipe', 'inherit'],
    })
    const info = await new Promise<{ id: string; pid: number }>((resolve, reject) => {
      proc.stdout!.once('data', (d) => resolve(JSON.parse(String(d))))
      proc.once('exit', () => reject(new Error('child exited early')))
    })
    proc.kill('SIGKILL')
    await new Promise((r) => proc.once('exit', r))
    return info
  }
  /** Waits (no Runtime involved, so no sweep) until the entry is gone; its history line says why. */
  async function endedBySelf(stateDir: string, id: string, cgroupDirs: string[]): Promise<string> {
    const deadline = Date.now() + 20_000
    while (fs.existsSync(path.join(stateDir, id)) && Date.now() < deadline) await sleep(50)
    expect(fs.existsSync(path.join(stateDir, id))).toBe(false)
    for (const dir of cgroupDirs) expect(fs.existsSync(dir)).toBe(false)
    expect(await processesLeft(id)).toEqual([])
    return JSON.parse(fs.readFileSync(path.join(stateDir, '.history', `${id}.json`), 'utf8')).reason
  }
  const cgroupsOf = (stateDir: string, id: string): string[] =>
    JSON.parse(fs.readFileSync(path.join(stateDir, id, 'state.json'), 'utf8')).cgroupDirs

  it('a detached sandbox whose agent is killed after its host died: gone by itself, recorded as crashed', async () => {
    const stateDir = runtimeState(runtime()).root
    const { id, pid } = await orphan(stateDir, { detached: true })
    const cgroups = cgroupsOf(stateDir, id)
    // The agent is the sandbox process's child (PID 1 inside).
    const agent = Number(fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(' ')[0])
    process.kill(agent, 'SIGKILL')
    expect(await endedBySelf(stateDir, id, cgroups)).toBe('crashed')
    const listed = runtime({ stateDir })
      .list({ includeHistorical: true })
      .find((h) => h.id === id)
    expect(listed).toMatchObject({ status: 'destroyed', destroyedReason: 'crashed' })
  })

  it('a detached sandbox that reaches its TTL after its host died: gone by itself, recorded as ttl_expired', async () => {
    const stateDir = runtimeState(runtime()).root
    const { id } = await orphan(stateDir, { detached: true, ttlMs: 1500 })
    expect(await endedBySelf(stateDir, id, cgroupsOf(stateDir, id))).toBe('ttl_expired')
  })

  it('an attached sandbox dies with its SIGKILLed host: gone by itself, recorded as host_exit', async () => {
    const stateDir = runtimeState(runtime()).root
    const { id } = await orphan(stateDir, {})
    // The entry may be gone when we look, or go while we read it; its record then comes from the reaper's history line.
    let cgroups: string[] = []
    try {
      cgroups = cgroupsOf(stateDir, id)
    } catch (err) {
      expect((err as NodeJS.ErrnoException).code).toBe('ENOENT')
    }
    expect(await endedBySelf(stateDir, id, cgroups)).toBe('host_exit')
  })
})

describe('telemetry', () => {
  it('emits spans for create (with phases), exec, fs and stop, and passes TRACEPARENT into commands', async () => {
    const otel = await import('@opentelemetry/api')
    const spans: Array<{ name: string; events: string[] }> = []
    const traceparent = '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'
    const tracer = {
      startSpan: () => {
        throw new Error('unused')
      },
      startActiveSpan: (name: string, _opts: unknown, fn: (span: unknown) => unknown) => {
        const record = { name, events: [] as string[] }
        spans.push(record)
        const span = {
          addEvent: (e: string) => record.events.push(e),
          end() {},
          recordException() {},
          setStatus() {},
          isRecording: () => true,
          spanContext: () => ({}),
        }
        const ctx = otel.trace.setSpan(otel.context.active(), span as never)
        return otel.context.with(ctx, () => fn(span))
      },
    }
    otel.trace.setGlobalTracerProvider({ getTracer: () => tracer as never })
    otel.propagation.setGlobalPropagator({
      inject: (_c, carrier: Record<string, string>) => {
        carrier.traceparent = traceparent
      },
      extract: (c) => c,
      fields: () => ['traceparent'],
    })
    try {
      const rt = runtime()
      const sb = await rt.create()
      const r = await sb.exec('sh', ['-c', 'echo $TRACEPARENT'])
      await sb.fs.stat('/workspace')
      await sb.stop()
      expect(r.stdout).toBe(`${traceparent}\n`)
      const names = spans.map((s) => s.name)
      expect(names).toEqual(
        expect.arrayContaining(['krunbox.create', 'krunbox.exec', 'krunbox.fs.stat', 'krunbox.stop']),
      )
      expect(spans.find((s) => s.name === 'krunbox.create')!.events).toEqual(['image', 'spawn', 'boot', 'agent ready'])
    } finally {
      otel.trace.disable()
      otel.propagation.disable()
    }
  })
})
