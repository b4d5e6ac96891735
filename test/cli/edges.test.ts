/**
 * The small edges a new user meets first. -V; an option a verb does not take
 * (parseArgs' own advice was to put it after --, which for run and exec starts the sandbox's
 * command with it); `<verb> --help` gives that verb's usage; `stop` answers as sb.stop() does;
 * no driver warning on the normal path; the class name of errors; the @types/node floor said.
 * (Issue 31, point 6.)
 */
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ensureCliBuilt, krunbox, privateCliEnv, repoRoot, stopAll, UUID_LINE } from './helpers.js'

const run = promisify(execFile)
const { home, env } = privateCliEnv()

beforeAll(async () => {
  await ensureCliBuilt()
}, 120_000)

afterAll(async () => {
  await stopAll(env)
  fs.rmSync(home, { recursive: true, force: true })
})

describe('the CLI', () => {
  it('-V prints the version as --version does', async () => {
    const [short, long] = await Promise.all([krunbox(['-V'], { env }), krunbox(['--version'], { env })])
    expect(short.code).toBe(0)
    expect(short.stdout).toMatch(/^krunbox \d+\.\d+\.\d+/)
    expect(short.stdout).toBe(long.stdout)
  })

  it('an option a verb does not take is S001 naming the option and the verb, with no advice to put it after --', async () => {
    for (const args of [
      ['stop', '00000000-0000-4000-8000-000000000000', '--bogus'],
      ['logs', 'x', 'y', '--json'],
      ['download', 'x', '/a', '-', '--json'],
      ['doctor', '--json'],
      ['run', 'base', '--detach', '--', 'true'],
    ]) {
      const r = await krunbox(args, { env })
      const option = args.find((a) => a.startsWith('--') && a !== '--')!
      expect(r.code, args.join(' ')).toBe(125)
      expect(r.stderr).toBe(
        `krunbox: S001: option ${option} is not one krunbox ${args[0]} takes (see krunbox ${args[0]} --help)\n`,
      )
    }
  })

  it('<verb> --help prints that verb usage, and help alone the whole', async () => {
    const runHelp = await krunbox(['run', '--help'], { env })
    expect(runHelp.code).toBe(0)
    expect(runHelp.stdout).toMatch(/^usage: krunbox run <image> /)
    expect(runHelp.stdout).toContain('create a sandbox, run the command in it, stop it')
    expect(runHelp.stdout).not.toContain('port-forward')
    const stopHelp = await krunbox(['stop', '-h'], { env })
    expect(stopHelp.stdout).toMatch(/^usage: krunbox stop <id> \[--json\]/)
    const all = await krunbox(['--help'], { env })
    expect(all.stdout).toMatch(/^usage: krunbox <command>/)
    expect(all.stdout).toContain('port-forward')
  })

  it('stop answers as sb.stop(): stopped once, S004 the second time, not an error once it ended by itself, S002 for an unknown id', async () => {
    const created = await krunbox(['create', 'base'], { env })
    expect(created.stdout).toMatch(UUID_LINE)
    const id = created.stdout.trim()
    const first = await krunbox(['stop', id, '--json'], { env })
    expect([first.code, JSON.parse(first.stdout)]).toEqual([0, { sandboxId: id, stopped: true }])
    const second = await krunbox(['stop', id], { env })
    expect(second.code).toBe(125)
    expect(second.stderr).toMatch(/^krunbox: S004: sandbox \S+ is already stopped \(user_killed\)\n$/)

    const shortCreated = await krunbox(['create', 'base', '--idle-timeout', '300ms'], { env })
    expect(shortCreated.code, shortCreated.stderr).toBe(0)
    const short = shortCreated.stdout.trim()
    await expect
      .poll(async () => JSON.parse((await krunbox(['status', short, '--json'], { env })).stdout).status, {
        timeout: 30_000,
        interval: 200,
      })
      .toBe('destroyed')
    const ended = await krunbox(['stop', short, '--json'], { env })
    expect([ended.code, JSON.parse(ended.stdout)]).toEqual([0, { sandboxId: short, stopped: false }])
    expect(ended.stderr).toBe(`krunbox: sandbox ${short} had already ended (idle_expired)\n`)

    const unknown = await krunbox(['stop', '00000000-0000-4000-8000-000000000000'], { env })
    expect(unknown.code).toBe(125)
    expect(unknown.stderr).toMatch(/^krunbox: S002|no sandbox/)
  }, 90_000)
})

describe('the library', () => {
  it('a process that creates a sandbox on a host without KVM prints no driver warning; NODE_DEBUG=krunbox says why', async () => {
    const script = `import { Runtime } from ${JSON.stringify(path.join(repoRoot, 'dist/index.js'))}
const rt = new Runtime({ stateDir: process.argv[1] })
const sb = await rt.create({ image: 'base' })
process.stdout.write(sb.driver)
await rt.close()`
    const stateDir = path.join(home, 'lib-state')
    const quiet = await run(process.execPath, ['--input-type=module', '-e', script, stateDir], { env, timeout: 60_000 })
    expect(quiet.stdout).toBe('namespace')
    expect(quiet.stderr).toBe('')
    const told = await run(process.execPath, ['--input-type=module', '-e', script, stateDir], {
      env: { ...env, NODE_DEBUG: 'krunbox' },
      timeout: 60_000,
    })
    expect(told.stderr).toMatch(
      /KRUNBOX \d+: krunbox: using the namespace driver \(bubblewrap\) because microVMs cannot boot here: /,
    )
  }, 120_000)

  it('errors are SandboxError by constructor name, from the built ESM and CommonJS entry points', async () => {
    const probe = (load: string) => `${load}
try { new Runtime({ maxTtlMs: -1 }) } catch (e) { process.stdout.write(e.constructor.name + ' ' + e.name + ' ' + (e instanceof SandboxError)) }`
    const esm = await run(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        probe(`import { Runtime, SandboxError } from ${JSON.stringify(path.join(repoRoot, 'dist/index.js'))}`),
      ],
      { env },
    )
    const cjs = await run(
      process.execPath,
      [
        '-e',
        probe(`const { Runtime, SandboxError } = require(${JSON.stringify(path.join(repoRoot, 'dist/index.cjs'))})`),
      ],
      { env },
    )
    expect(esm.stdout).toBe('SandboxError SandboxError true')
    expect(cjs.stdout).toBe('SandboxError SandboxError true')
  })

  it('the shipped types say they need @types/node 20.11 or newer (EventEmitter<T> for .on)', () => {
    for (const file of ['dist/index.d.ts', 'README.md', 'docs/install.md']) {
      expect(fs.readFileSync(path.join(repoRoot, file), 'utf8'), file).toMatch(/@types\/node.{0,40}20\.11/)
    }
  })
})
