/**
 * Durations read as people write them (a bare number is seconds), --network,
 * --env, the status verb, --json documents and --version.
 * (Issue 15, point 3.)
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { parseDuration } from '../../lib/cli/durations.js'
import { ensureCliBuilt, krunbox, privateCliEnv, repoRoot, stopAll } from './helpers.js'

const { home, env } = privateCliEnv()

beforeAll(async () => {
  await ensureCliBuilt()
}, 120_000)

afterAll(async () => {
  await stopAll(env)
  fs.rmSync(home, { recursive: true, force: true })
})

async function json(args: string[]): Promise<any> {
  const r = await krunbox(args, { env })
  expect(r.stderr).toBe('')
  expect(r.stdout.trim().split('\n')).toHaveLength(1)
  return JSON.parse(r.stdout)
}

describe('durations', () => {
  it('a bare number is seconds; units ms, s, m, h, d', () => {
    expect(parseDuration('300', '--ttl')).toBe(300_000)
    expect(parseDuration('1.5', '--ttl')).toBe(1500)
    expect([
      parseDuration('500ms', 'x'),
      parseDuration('30s', 'x'),
      parseDuration('5m', 'x'),
      parseDuration('1h', 'x'),
      parseDuration('1d', 'x'),
    ]).toEqual([500, 30_000, 300_000, 3_600_000, 86_400_000])
    expect(() => parseDuration('5y', '--ttl')).toThrow(
      expect.objectContaining({ code: 'S001', message: expect.stringContaining('"5y"') }),
    )
  })

  it('help says a bare number is seconds', async () => {
    const r = await krunbox(['--help'], { env })
    expect(r.stdout).toMatch(/bare number is seconds/)
  })

  it('create --idle-timeout 300 means 5 minutes: the sandbox lives on and runs the next exec', async () => {
    const created = await json(['create', 'base', '--idle-timeout', '300', '--json'])
    expect(created.idleTimeoutMs).toBe(300_000)
    // The detached default TTL (1 h) applies when --ttl is not given.
    expect(created.expiresAt - Date.now()).toBeGreaterThan(3_500_000)
    const r = await krunbox(['exec', created.id, '--', 'echo', 'alive'], { env })
    expect(r.stdout).toBe('alive\n')
    await krunbox(['stop', created.id], { env })
  })

  it('create --idle-timeout 1s is reaped, and status says why', async () => {
    const { id } = await json(['create', 'base', '--idle-timeout', '1s', '--json'])
    await expect
      .poll(async () => (await json(['status', id, '--json'])).status, { timeout: 30_000, interval: 200 })
      .toBe('destroyed')
    expect((await json(['status', id, '--json'])).destroyedReason).toBe('idle_expired')
    const text = await krunbox(['status', id], { env })
    expect(text.stdout).toMatch(/^status\tdestroyed \(idle_expired\)$/m)
  })
})

describe('flags and machine-readable output', () => {
  let id = ''
  beforeAll(async () => {
    id = (await json(['create', 'base', '--name', 'flags', '--env', 'A=1', '--json'])).id
  }, 60_000)

  it('--env and -e set variables, repeatable; exec --json prints one document and exits with the code', async () => {
    const r = await krunbox(
      ['exec', id, '--json', '--env', 'B=2', '-e', 'C=3', '--', 'sh', '-c', 'echo $A$B$C; echo oops >&2; exit 4'],
      { env },
    )
    expect(r.code).toBe(4)
    const doc = JSON.parse(r.stdout)
    expect(doc).toMatchObject({
      sandboxId: id,
      exitCode: 4,
      status: 'exited',
      timedOut: false,
      stdout: '123\n',
      stderr: 'oops\n',
    })
  })

  it('run --json', async () => {
    const r = await krunbox(['run', 'base', '--json', '--', 'echo', 'hi'], { env })
    expect(r.code).toBe(0)
    expect(JSON.parse(r.stdout)).toMatchObject({ exitCode: 0, stdout: 'hi\n' })
  })

  it('status and list --json describe the sandbox', async () => {
    const status = await json(['status', id, '--json'])
    expect(status).toMatchObject({ id, name: 'flags', image: 'base', metadata: {}, network: null })
    expect((await krunbox(['status', id], { env })).stdout).toMatch(/^network\tloopback only$/m)
    const rows = await json(['list', '--json'])
    expect(rows.map((r: { id: string }) => r.id)).toContain(id)
    const missing = await krunbox(['status', 'no-such-id'], { env })
    expect(missing.code).toBe(125)
    expect(missing.stderr).toMatch(/^krunbox: S002: .*no-such-id/)
  })

  it("run --network gives the sandbox a filtered network of its own (docs/network.md), never the host's interfaces", async () => {
    const probe = ['--', 'sh', '-c', 'cat /proc/net/dev; echo "proxy=$https_proxy"']
    const names = (out: string) =>
      out
        .split('\n')
        .filter((l) => l.includes(':') && !l.startsWith('proxy='))
        .map((l) => l.split(':')[0].trim())
    const open = await krunbox(['run', 'base', '--network', ...probe], { env })
    expect(open.code).toBe(0)
    expect(names(open.stdout).every((n) => n === 'lo' || n === 'tap0')).toBe(true)
    expect(open.stdout).toMatch(/proxy=http:\/\/127\.0\.0\.1:\d+/)
    const closed = await krunbox(['run', 'base', ...probe], { env })
    expect(names(closed.stdout)).toEqual(['lo'])
    expect(closed.stdout).toMatch(/proxy=$/m)
    const both = await krunbox(['run', 'base', '--network', '--allow', 'a.test', '--', 'true'], { env })
    expect(both.code).toBe(125)
    expect(both.stderr).toMatch(/S001.*--allow/)
  })

  it('create --allow keeps the filter after the CLI exits: a name outside the list is refused, the allowed one looked up', async () => {
    const id = (
      await krunbox(['create', 'base', '--allow', 'allowed.test', '--allow', '*.pkg.test'], { env })
    ).stdout.trim()
    const status = await json(['status', id, '--json'])
    expect(status.network).toMatchObject({ allow: ['allowed.test', '*.pkg.test'] })
    // Nothing is sent anywhere: the proxy answers both itself, before any connection. The
    // keeper logs why: one is not in the list, the other is but resolves nowhere.
    const fetch = async (host: string) =>
      (await krunbox(['exec', id, '--', 'sh', '-c', `wget -q -O- http://${host}/ 2>&1; true`], { env })).stdout
    expect(await fetch('other.test')).toContain('403 Forbidden')
    expect(await fetch('allowed.test')).toContain('403 Forbidden')
    const log = fs.readFileSync(path.join(home, 'state', 'krunbox', 'sandboxes', id, 'network-keeper.log'), 'utf8')
    expect(log).toMatch(/"destination":"other\.test:80".*not in the allow list/)
    expect(log).toMatch(/"destination":"allowed\.test:80".*does not resolve/)
    expect((await krunbox(['stop', id], { env })).code).toBe(0)
  })

  it('--version prints the package version', async () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(repoRoot, 'package.json'), 'utf8'))
    const r = await krunbox(['--version'], { env })
    expect(r.stdout).toBe(`krunbox ${pkg.version}\n`)
  })
})
