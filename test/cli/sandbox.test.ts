/**
 * Long-lived sandboxes through separate CLI invocations: create, exec (streaming, stdin,
 * --detach), logs, list, stop, upload/download with pipes, and a TTL that outlives the CLI.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { UUID_LINE, ensureCliBuilt, krunbox, privateCliEnv, stopAll } from './helpers.js'

const { home, env } = privateCliEnv()
let sb = ''

beforeAll(async () => {
  await ensureCliBuilt()
  const created = await krunbox(['create', 'base', '--name', 'cli-test', '--idle-timeout', '2m'], { env })
  expect(created.code).toBe(0)
  expect(created.stdout).toMatch(UUID_LINE)
  sb = created.stdout.trim()
}, 120_000)

afterAll(async () => {
  await stopAll(env)
  fs.rmSync(home, { recursive: true, force: true })
})

describe('create and exec from separate invocations', () => {
  it('create printed only the id, and the sandbox outlived the CLI that created it', async () => {
    const r = await krunbox(['exec', sb, '--', 'cat', '/etc/hostname'], { env })
    expect(r.code).toBe(0)
    const list = await krunbox(['list'], { env })
    expect(list.stdout).toMatch(new RegExp(`^${sb}\\tcli-test\\tbase\\t(idle|running)\\t`, 'm'))
  })

  it("streams stdout and stderr apart and exits with the child's code", async () => {
    const r = await krunbox(['exec', sb, '--', 'sh', '-c', 'echo out; echo err >&2; exit 3'], { env })
    expect(r.stdout).toBe('out\n')
    expect(r.stderr).toBe('err\n')
    expect(r.code).toBe(3)
  })

  it('streams output as it comes, not when the command ends', async () => {
    let firstOutputAt = 0
    const spawnedAt = performance.now()
    const r = await krunbox(['exec', sb, '--', 'sh', '-c', 'echo first; sleep 1.5; echo second'], {
      env,
      onSpawn: (child) => child.stdout!.once('data', () => (firstOutputAt = performance.now() - spawnedAt)),
    })
    expect(r.stdout).toBe('first\nsecond\n')
    expect(firstOutputAt).toBeGreaterThan(0)
    expect(r.ms - firstOutputAt).toBeGreaterThan(1000)
  })

  it('pipes stdin into the command, with flow control for large input', async () => {
    expect((await krunbox(['exec', sb, '--', 'wc', '-l'], { env, input: 'a\nb\nc\n' })).stdout.trim()).toBe('3')
    const big = crypto.randomBytes(3 * 1024 * 1024)
    const r = await krunbox(['exec', sb, '--', 'sha256sum'], { env, input: big })
    expect(r.stdout.split(' ')[0]).toBe(crypto.createHash('sha256').update(big).digest('hex'))
  })

  it('passes -e and exits 124 on --timeout', async () => {
    expect((await krunbox(['exec', sb, '-e', 'X=42', '--', 'sh', '-c', 'echo $X'], { env })).stdout).toBe('42\n')
    const t = await krunbox(['exec', sb, '--timeout', '200ms', '--', 'sleep', '5'], { env })
    expect(t.code).toBe(124)
    expect(t.ms).toBeLessThan(4000)
  })

  it('refuses a wrong access token with S005', async () => {
    const r = await krunbox(['exec', sb, '--', 'true'], { env: { ...env, KRUNBOX_TOKEN: 'wrong' } })
    expect(r.code).toBe(125)
    expect(r.stderr).toMatch(/^krunbox: S005: wrong accessToken/)
  })
})

describe('logs of a detached command', () => {
  it('exec --detach prints the command id at once; logs, --follow and --after-seq read its output', async () => {
    // The command cannot get past its first line before the CLI that started it has returned.
    const started = await krunbox(
      [
        'exec',
        sb,
        '--detach',
        '--',
        'sh',
        '-c',
        'echo one; while [ ! -e /tmp/detach-go ]; do sleep 0.05; done; echo two >&2; sleep 0.3; echo three; sleep 1',
      ],
      { env },
    )
    expect(started.code).toBe(0)
    expect(started.stdout).toMatch(/^c-[0-9a-f-]{36}\n$/)
    const commandId = started.stdout.trim()
    expect((await krunbox(['exec', sb, '--', 'touch', '/tmp/detach-go'], { env })).code).toBe(0)

    // --follow replays what is there and returns when the command ends (it outlived the CLI that started it).
    const followed = await krunbox(['logs', sb, commandId, '--follow'], { env })
    expect(followed.code).toBe(0)
    expect(followed.stdout).toBe('one\nthree\n')
    expect(followed.stderr).toBe('two\n')
    expect(followed.ms).toBeGreaterThan(1000)

    const all = await krunbox(['logs', sb, commandId], { env })
    expect([all.stdout, all.stderr]).toEqual(['one\nthree\n', 'two\n'])
    // Three writes, three chunks (seq 1..3): after seq 2 only the last one is left.
    const tail = await krunbox(['logs', sb, commandId, '--after-seq', '2'], { env })
    expect([tail.stdout, tail.stderr]).toEqual(['three\n', ''])
  })

  it('an unknown command id is S008', async () => {
    const r = await krunbox(['logs', sb, 'c-00000000-0000-4000-8000-000000000000'], { env })
    expect(r.code).toBe(125)
    expect(r.stderr).toMatch(/^krunbox: S008: /)
  })
})

describe('upload and download', () => {
  it('tar -cf - dir | krunbox upload "$SB" - /workspace/src.tar, then tar -tf inside lists the files', async () => {
    const src = path.join(home, 'src')
    fs.mkdirSync(path.join(src, 'lib'), { recursive: true })
    fs.writeFileSync(path.join(src, 'main.py'), 'print("hi")\n')
    fs.writeFileSync(path.join(src, 'lib', 'util.py'), 'X = 1\n')
    const up = await krunbox(`tar -C "${home}" -cf - src | $CLI upload "$SB" - /workspace/src.tar`, {
      env: { ...env, SB: sb },
    })
    expect(up.stderr).toBe('')
    expect(up.code).toBe(0)
    const listing = await krunbox(['exec', sb, '--', 'tar', '-tf', '/workspace/src.tar'], { env })
    expect(listing.stdout.trim().split('\n').sort()).toEqual(['src/', 'src/lib/', 'src/lib/util.py', 'src/main.py'])
  })

  it('download "$SB" <file> - writes the file byte-exact to stdout', async () => {
    const data = crypto.randomBytes(2 * 1024 * 1024 + 17)
    expect((await krunbox(['upload', sb, '-', '/workspace/x', '--mode', '600'], { env, input: data })).code).toBe(0)
    expect((await krunbox(['exec', sb, '--', 'stat', '-c', '%a %s', '/workspace/x'], { env })).stdout).toBe(
      `600 ${data.length}\n`,
    )
    const down = await krunbox(['download', sb, '/workspace/x', '-'], { env })
    expect(down.code).toBe(0)
    expect(down.stdoutBytes.equals(data)).toBe(true)
  })

  it('uploads and downloads directories and files by host path', async () => {
    const tree = path.join(home, 'tree')
    fs.mkdirSync(path.join(tree, 'd'), { recursive: true })
    fs.writeFileSync(path.join(tree, 'd', 'f.txt'), 'tree file\n')
    expect((await krunbox(['upload', sb, tree, '/workspace/tree'], { env })).code).toBe(0)
    const back = path.join(home, 'back')
    expect((await krunbox(['download', sb, '/workspace/tree', back], { env })).code).toBe(0)
    expect(fs.readFileSync(path.join(back, 'd', 'f.txt'), 'utf8')).toBe('tree file\n')
  })

  it('--parents creates missing directories; without it the missing path is S211', async () => {
    const without = await krunbox(['upload', sb, '-', '/workspace/a/b/c.txt'], { env, input: 'x' })
    expect(without.code).toBe(125)
    expect(without.stderr).toMatch(/^krunbox: S211: \/workspace\/a\/b\/c\.txt/)
    expect((await krunbox(['upload', sb, '-', '/workspace/a/b/c.txt', '--parents'], { env, input: 'deep' })).code).toBe(
      0,
    )
    expect((await krunbox(['exec', sb, '--', 'cat', '/workspace/a/b/c.txt'], { env })).stdout).toBe('deep')
  })

  it('a reader that stops early ends download like SIGPIPE (141), quietly', async () => {
    const r = await krunbox(`{ $CLI download "$SB" /workspace/x -; echo "cli exit $?" >&2; } | head -c 5 | wc -c`, {
      env: { ...env, SB: sb },
    })
    expect(r.stdout.trim()).toBe('5')
    expect(r.stderr).toBe('cli exit 141\n')
  })
})

describe('stop', () => {
  it('ends the sandbox; list --all shows why; a second stop fails', async () => {
    const created = await krunbox(['create', 'base'], { env })
    const id = created.stdout.trim()
    const stopped = await krunbox(['stop', id], { env })
    expect(stopped.code).toBe(0)
    expect(stopped.stdout).toBe('')
    expect((await krunbox(['list'], { env })).stdout).not.toContain(id)
    expect((await krunbox(['list', '--all'], { env })).stdout).toMatch(
      new RegExp(`^${id}\\t-\\tbase\\tdestroyed\\(user_killed\\)\\t`, 'm'),
    )
    const again = await krunbox(['stop', id], { env })
    expect(again.code).toBe(125)
    expect(again.stderr).toMatch(/^krunbox: S00[24]: /)
    expect((await krunbox(['exec', id, '--', 'true'], { env })).stderr).toMatch(/^krunbox: S002: /)
  })
})

describe('create --ttl', () => {
  it('ends by itself after the TTL although the CLI that created it has exited', async () => {
    // Long enough that a CLI starting on a loaded machine still finds it alive.
    const created = await krunbox(['create', 'base', '--ttl', '8s'], { env })
    const createdAt = performance.now()
    const id = created.stdout.trim()
    expect(created.code).toBe(0) // the creating CLI is gone from here on
    expect((await krunbox(['list'], { env })).stdout).toMatch(new RegExp(`^${id}\\t.*\\t\\d{4}-\\d\\d-\\d\\dT`, 'm'))
    let goneAfter = 0
    while (performance.now() - createdAt < 40_000) {
      if (!(await krunbox(['list'], { env })).stdout.includes(id)) {
        goneAfter = performance.now() - createdAt
        break
      }
    }
    // The TTL counts from the agent's start, a moment before the creating CLI returned.
    expect(goneAfter).toBeGreaterThan(4000)
    expect(goneAfter).toBeLessThan(30_000)
    expect((await krunbox(['list', '--all'], { env })).stdout).toMatch(
      new RegExp(`^${id}\\t.*\\tdestroyed\\(ttl_expired\\)\\t`, 'm'),
    )
  }, 60_000)
})
