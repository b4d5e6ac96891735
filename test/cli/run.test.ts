/** `krunbox run` (one-shot sandboxes), error reporting, `doctor`. Images from the default cache. */
import fs from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { hostProbe } from '../../lib/probe.js'
import { ensureCliBuilt, krunbox, privateCliEnv } from './helpers.js'

const { home, env } = privateCliEnv()

beforeAll(ensureCliBuilt, 120_000)
afterAll(() => fs.rmSync(home, { recursive: true, force: true }))

describe('krunbox run', () => {
  it('runs python3 with its standard library in the python preset', async () => {
    const r = await krunbox(['run', 'python', '--', 'python3', '-c', 'import json,sqlite3;print(1)'], {
      env,
      timeoutMs: 120_000,
    })
    expect(r.stderr).toBe('')
    expect(r.stdout).toBe('1\n')
    expect(r.code).toBe(0)
  }, 120_000)

  it('runs node in the node preset', async () => {
    const r = await krunbox(['run', 'node', '--', 'node', '-e', 'console.log(1)'], { env, timeoutMs: 120_000 })
    expect(r.stdout).toBe('1\n')
    expect(r.code).toBe(0)
  }, 120_000)

  it("exits with the command's exit code and keeps stdout and stderr apart", async () => {
    const r = await krunbox(['run', 'base', '--', 'sh', '-c', 'echo to-out; echo to-err >&2; exit 7'], { env })
    expect(r.code).toBe(7)
    expect(r.stdout).toBe('to-out\n')
    expect(r.stderr).toBe('to-err\n')
  })

  it('exits 128+n when the command dies of signal n, 127 when it cannot start', async () => {
    expect((await krunbox(['run', 'base', '--', 'sh', '-c', 'kill -9 $$'], { env })).code).toBe(137)
    const missing = await krunbox(['run', 'base', '--', 'no-such-program'], { env })
    expect(missing.code).toBe(127)
    expect(missing.stderr).toMatch(/krunbox: cannot run no-such-program/)
  })

  it('exits 124 soon after --timeout', async () => {
    const r = await krunbox(['run', 'base', '--timeout', '300ms', '--', 'sleep', '5'], { env })
    expect(r.code).toBe(124)
    expect(r.ms).toBeLessThan(4000)
  })

  it('passes -e K=V to the command (values may contain =)', async () => {
    const r = await krunbox(
      ['run', 'base', '-e', 'GREETING=hello', '-e', 'PAIR=a=b', '--', 'sh', '-c', 'echo "$GREETING $PAIR"'],
      { env },
    )
    expect(r.stdout).toBe('hello a=b\n')
  })

  it('pipes stdin into the command', async () => {
    const r = await krunbox(['run', 'base', '--', 'sh', '-c', 'tr a-z A-Z'], { env, input: 'shout\n' })
    expect(r.stdout).toBe('SHOUT\n')
    expect(r.code).toBe(0)
  })

  it('stops its sandbox afterwards', async () => {
    await krunbox(['run', 'base', '--', 'true'], { env })
    expect((await krunbox(['list'], { env })).stdout.trim().split('\n')).toHaveLength(1) // the header only
    const all = await krunbox(['list', '--all'], { env })
    expect(all.stdout).toMatch(/\tbase\tdestroyed\(user_killed\)\t/)
  })

  it('forwards Ctrl-C to the command and exits with its code', async () => {
    const script = 'trap "echo got INT; exit 5" INT; echo ready; sleep 20 & wait'
    const r = await krunbox(['run', 'base', '--', 'sh', '-c', script], {
      env,
      onSpawn: (child) => child.stdout!.once('data', () => child.kill('SIGINT')),
    })
    expect(r.stdout).toBe('ready\ngot INT\n')
    expect(r.code).toBe(5)
    expect(r.ms).toBeLessThan(10_000)
  })
})

describe('krunbox errors', () => {
  const cases: Array<[string, string[], RegExp]> = [
    ['unknown image', ['run', 'no-such-image', '--', 'true'], /^krunbox: S101: .*no-such-image/],
    ['unknown flag', ['run', 'base', '--frobnicate', '--', 'true'], /^krunbox: S001: .*--frobnicate/],
    [
      'bad duration',
      ['run', 'base', '--timeout', '5 parsecs', '--', 'true'],
      /^krunbox: S001: --timeout .*"5 parsecs"/,
    ],
    ['bad -e', ['run', 'base', '-e', 'NOEQUALS', '--', 'true'], /^krunbox: S001: -e .*"NOEQUALS"/],
    ['no command', ['run', 'base'], /^krunbox: S001: a command must be given after --/],
    ['a command without --', ['run', 'base', 'echo', 'hi'], /^krunbox: S001: argument "echo" is unexpected/],
    ['unknown verb', ['frobnicate'], /^krunbox: S001: command "frobnicate" is unknown/],
    ['malformed id', ['exec', 'not-an-id', '--', 'true'], /^krunbox: S001: sandbox id .*not-an-id/],
    ['unknown sandbox', ['stop', '00000000-0000-4000-8000-000000000000'], /^krunbox: S002: /],
  ]
  for (const [what, args, message] of cases) {
    it(`${what}: S-code on stderr, exit 125, nothing on stdout`, async () => {
      const r = await krunbox(args, { env })
      expect(r.stderr).toMatch(message)
      expect(r.code).toBe(125)
      expect(r.stdout).toBe('')
    })
  }

  it('help prints the usage on stdout and exits 0', async () => {
    const r = await krunbox(['help'], { env })
    expect(r.code).toBe(0)
    expect(r.stdout).toMatch(/^usage: krunbox/)
    expect(r.stdout).toMatch(/exec <id> .*--detach/)
  })
})

describe('krunbox doctor', () => {
  it('names the KVM backend (software here) and the driver auto picks, as the host probe sees them', async () => {
    const probe = hostProbe()
    const r = await krunbox(['doctor'], { env })
    expect(r.code).toBe(0)
    expect(r.stdout).toContain(`KVM backend:             ${probe.kvm.backend ?? 'none loaded'}`)
    if (probe.kvm.softwareBackend)
      expect(r.stdout).toMatch(/KVM backend: +\S+ \(software emulation: microVMs cannot boot\)/)
    if (probe.krunUnavailableReason !== null)
      expect(r.stdout).toContain(
        `driver auto -> namespace (bubblewrap); krun unavailable: ${probe.krunUnavailableReason}`,
      )
    expect(r.stdout).toMatch(/bubblewrap: +\/\S*bwrap/)
  })
})
