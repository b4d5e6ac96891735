/** Background commands, sequenced logs, bounded output, cancellation, exec that always terminates. (Issue 3.) */
import { execFile } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { PassThrough, Writable } from 'node:stream'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { LogChunk } from '../../lib/command.js'
import { SandboxError } from '../../lib/errors.js'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { sleep, testRuntime } from '../helpers/runtime.js'
import { runtimeState } from '../../lib/runtime.js'

let rt: Runtime
let sb: Sandbox

beforeAll(async () => {
  rt = testRuntime()
  sb = await rt.create({ image: 'base', driver: 'namespace', env: { FROM_CREATE: 'c', BOTH: 'create' } })
})
afterAll(async () => {
  await rt.close()
})

const sha = (b: Buffer) => crypto.createHash('sha256').update(b).digest('hex')

describe('start and logs', () => {
  it('returns at once with an id and a status, and several commands run at once', async () => {
    const a = sb.start('sh', ['-c', 'sleep 0.5; echo a'])
    const b = sb.start('sh', ['-c', 'echo b'])
    expect(a.id).toMatch(/^c-/)
    expect(['queued', 'starting', 'running']).toContain(a.status)
    const [ra, rb] = await Promise.all([a.wait(), b.wait()])
    expect(ra.exitCode).toBe(0)
    expect(rb.exitCode).toBe(0)
    expect(a.status).toBe('exited')
    const listed = await sb.commands()
    expect(listed.map((c) => c.id)).toEqual(expect.arrayContaining([a.id, b.id]))
    expect((await sb.command(a.id))?.id).toBe(a.id)
    expect(await sb.command('c-unknown')).toBeUndefined()
  })

  it('numbers chunks with one strictly increasing seq across stdout and stderr, losing nothing', async () => {
    const cmd = sb.start('sh', [
      '-c',
      'i=0; while [ $i -lt 3000 ]; do echo "out $i"; echo "err $i" >&2; i=$((i+1)); done',
    ])
    const chunks: LogChunk[] = []
    cmd.on('log', (c) => chunks.push(c))
    const r = await cmd.wait()
    expect(r.exitCode).toBe(0)
    for (let i = 1; i < chunks.length; i++) expect(chunks[i].seq).toBeGreaterThan(chunks[i - 1].seq)
    const out = Buffer.concat(chunks.filter((c) => c.stream === 'stdout').map((c) => c.data)).toString()
    const err = Buffer.concat(chunks.filter((c) => c.stream === 'stderr').map((c) => c.data)).toString()
    const expected = (p: string) => Array.from({ length: 3000 }, (_, i) => `${p} ${i}\n`).join('')
    expect(sha(Buffer.from(out))).toBe(sha(Buffer.from(expected('out'))))
    expect(sha(Buffer.from(err))).toBe(sha(Buffer.from(expected('err'))))
    // A late consumer replays exactly the same chunks.
    const replay: LogChunk[] = []
    for await (const c of cmd.logs()) replay.push(c)
    expect(replay.map((c) => c.seq)).toEqual(chunks.map((c) => c.seq))
  })

  it('resumes after a given seq with exactly the missing chunks, and pages with readLogs', async () => {
    const cmd = sb.start('sh', ['-c', 'for i in 1 2 3 4 5 6; do echo $i; sleep 0.05; done'])
    const seen: LogChunk[] = []
    for await (const c of cmd.logs()) {
      seen.push(c)
      if (seen.length === 2) break // detach
    }
    await cmd.wait()
    const rest: LogChunk[] = []
    for await (const c of cmd.logs({ afterSeq: seen[1].seq })) rest.push(c)
    const all = [...seen, ...rest].map((c) => c.data.toString()).join('')
    expect(all).toBe('1\n2\n3\n4\n5\n6\n')
    const page = await cmd.readLogs({ afterSeq: 0, limit: 4 })
    expect(page.data.length).toBe(4)
    expect(page.hasMore).toBe(true)
    const page2 = await cmd.readLogs({ afterSeq: page.nextSeq, limit: 100 })
    expect([...page.data, ...page2.data].map((c) => c.data.toString()).join('')).toBe('1\n2\n3\n4\n5\n6\n')
    expect(page2.hasMore).toBe(false)
    await expect(cmd.readLogs({ limit: 101 })).rejects.toMatchObject({ code: 'S003' })
  })

  it('downloads the complete log of a stream to a file and to a writable', async () => {
    const cmd = sb.start('sh', ['-c', 'seq 1 20000; echo e >&2'])
    await cmd.wait()
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-logs-'))
    const file = path.join(dir, 'out.log')
    await cmd.downloadLogs('stdout', file)
    expect(fs.readFileSync(file, 'utf8')).toBe(Array.from({ length: 20000 }, (_, i) => `${i + 1}\n`).join(''))
    fs.rmSync(dir, { recursive: true })
    const parts: Buffer[] = []
    await cmd.downloadLogs('stderr', new Writable({ write: (c, _e, cb) => (parts.push(c), cb()) }))
    expect(Buffer.concat(parts).toString()).toBe('e\n')
  })

  it('downloadLogs to a path it cannot write, or into a Writable that fails, while the command still runs: a SandboxError naming it, never an uncaught error', async () => {
    // Runs until canceled: the destination fails while the log is still followed.
    const cmd = sb.start('sh', ['-c', 'echo first; sleep 60'])
    const missing = path.join(os.tmpdir(), 'kb-no-such-dir', 'out.log')
    const notWritable = await cmd.downloadLogs('stdout', missing).catch((e) => e)
    expect(notWritable).toBeInstanceOf(SandboxError)
    expect(notWritable.code).toBe('S211')
    expect(notWritable.message).toContain(missing)
    const broken = new Writable({ write: (_c, _e, cb) => cb(new Error('disk on fire')) })
    const failed = await cmd.downloadLogs('stdout', broken).catch((e) => e)
    expect(failed).toBeInstanceOf(SandboxError)
    expect(failed.code).toBe('S210')
    expect(failed.message).toContain('disk on fire')
    await cmd.cancel({ mode: 'force' })
  })

  it('bounds retention: a flood marks truncation, a resume from the dropped range fails with S223, host memory stays flat', async () => {
    const before = process.memoryUsage().rss
    const cmd = sb.start('sh', ['-c', 'head -c 300000000 /dev/zero'], { retainBytes: 1024 * 1024, timeoutMs: 120_000 })
    let bytes = 0
    cmd.on('stdout', (d) => (bytes += d.length))
    const r = await cmd.wait()
    const grown = process.memoryUsage().rss - before
    expect(bytes).toBe(300_000_000)
    expect(r.stdoutTruncated).toBe(true)
    expect(grown).toBeLessThan(150 * 1024 * 1024)
    const err = await (async () => {
      for await (const _ of cmd.logs({ afterSeq: 0 })) break
    })().catch((e) => e)
    expect(err).toBeInstanceOf(SandboxError)
    expect(err.code).toBe('S223')
  }, 120_000)

  it('slows a producer down for a slow consumer instead of buffering (follow has flow control)', async () => {
    // The pause lets the iterator attach before the first byte (retention is only 1 MiB).
    const cmd = sb.start('sh', ['-c', 'sleep 0.3; head -c 20000000 /dev/zero; echo done >&2'], {
      retainBytes: 1024 * 1024,
    })
    let got = 0
    for await (const c of cmd.logs({ stream: 'stdout' })) {
      got += c.data.length
      if (got < 4_000_000) await sleep(1)
    }
    expect(got).toBe(20_000_000)
  }, 60_000)
})

describe('options', () => {
  it('layers exec env over create env and injects the sandbox context', async () => {
    const r = await sb.exec(
      'sh',
      ['-c', 'echo $FROM_CREATE $BOTH $KRUNBOX $KRUNBOX_SANDBOX_ID $KRUNBOX_IMAGE $KRUNBOX_WORKSPACE; pwd'],
      { env: { BOTH: 'exec' } },
    )
    expect(r.stdout).toBe(`c exec 1 ${sb.id} base /workspace\n/workspace\n`)
  })

  it('runs a command line through /bin/sh with shell: true and takes stdin from a stream', async () => {
    const cmd = sb.start('tr a-z A-Z | wc -c', [], {
      shell: true,
      stdin: (() => {
        const p = new PassThrough()
        p.end('abc\n')
        return p
      })(),
    })
    const out: Buffer[] = []
    cmd.on('stdout', (d) => out.push(d))
    await cmd.wait()
    expect(Buffer.concat(out).toString().trim()).toBe('4')
  })

  it('returns the same command for a repeated idempotency key', async () => {
    const a = sb.start('sh', ['-c', 'echo once >> /tmp/idem; cat /tmp/idem'], { idempotencyKey: 'k1' })
    const b = sb.start('sh', ['-c', 'echo once >> /tmp/idem; cat /tmp/idem'], { idempotencyKey: 'k1' })
    expect(b).toBe(a)
    await a.wait()
    expect((await sb.exec('cat', ['/tmp/idem'])).stdout).toBe('once\n')
  })

  it('ends a command that cannot run as failed, with a reason, distinct from a non-zero exit', async () => {
    const r = await sb.start('/no/such/binary').wait()
    expect(r.status).toBe('failed')
    expect(r.failReason).toMatch(/no such file|not found/i)
    const bad = await sb.start('true', [], { cwd: '/no/such/dir' }).wait()
    expect(bad.status).toBe('failed')
    const nonzero = await sb.start('false').wait()
    expect(nonzero.status).toBe('exited')
    expect(nonzero.exitCode).toBe(1)
  })

  it('reports resource usage, with the peak RSS of the command itself', async () => {
    const r = await sb.start('sh', ['-c', 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done']).wait()
    expect(r.usage).not.toBeNull()
    expect(r.usage!.userMs + r.usage!.systemMs).toBeGreaterThan(0)
    // dd touches its 48 MiB block: its own peak, not the agent's (which a vforked child inherits).
    const big = await sb.start('dd', ['if=/dev/zero', 'of=/dev/null', 'bs=48M', 'count=1']).wait()
    expect(big.usage!.maxRssKb).toBeGreaterThan(48 * 1024)
    expect(big.usage!.maxRssKb).toBeLessThan(64 * 1024)
    // A tiny process stays below the agent's own peak: unknown, never the agent's figure.
    const small = await sb.start('true').wait()
    expect(small.usage!.maxRssKb === null || small.usage!.maxRssKb < 2048).toBe(true)
  })
})

describe('cancellation and termination', () => {
  it('graceful cancel sends SIGTERM; a process ignoring it is killed after the grace period', async () => {
    const polite = sb.start('sleep', ['30'])
    await polite.started()
    await polite.cancel({ mode: 'graceful' })
    const r1 = await polite.wait()
    expect(r1.status).toBe('canceled')
    expect(r1.cancelMode).toBe('graceful')
    expect(r1.terminationSignal).toBe('SIGTERM')
    expect(r1.canceledAt).toBeGreaterThan(0)

    // It says when its trap is set: a SIGTERM before that would end it, not test the grace.
    const stubborn = sb.start('sh', ['-c', 'trap "" TERM; echo trapped; while :; do sleep 1; done'])
    await new Promise((resolve) => stubborn.once('stdout', resolve))
    const t0 = Date.now()
    await stubborn.cancel({ mode: 'graceful', graceMs: 300 })
    const r2 = await stubborn.wait()
    expect(r2.status).toBe('canceled')
    expect(r2.terminationSignal).toBe('SIGKILL')
    expect(Date.now() - t0).toBeLessThan(2500)
  })

  it('force cancel kills at once; cancelling a finished command is a no-op', async () => {
    const c = sb.start('sleep', ['30'])
    await c.started()
    await c.cancel({ mode: 'force' })
    const r = await c.wait()
    expect(r.status).toBe('canceled')
    expect(r.cancelMode).toBe('force')
    expect(r.signal).toBe('SIGKILL')
    const again = await c.cancel({ mode: 'force' })
    expect(again.status).toBe('canceled')
    await expect(c.cancel({ mode: 'sideways' as never })).rejects.toMatchObject({ code: 'S001' })
  })

  it('an aborted signal cancels: start ends canceled, exec rejects with S206', async () => {
    const ac = new AbortController()
    const c = sb.start('sleep', ['30'], { signal: ac.signal })
    setTimeout(() => ac.abort(), 100)
    expect((await c.wait()).status).toBe('canceled')
    const ac2 = new AbortController()
    setTimeout(() => ac2.abort(new Error('enough')), 100)
    await expect(sb.exec('sleep', ['30'], { signal: ac2.signal })).rejects.toMatchObject({ code: 'S206' })
  })

  const terminating: Array<[string, string[]]> = [
    ['a process ignoring SIGTERM', ['sh', '-c', 'trap "" TERM; sleep 100']],
    ['a grandchild holding stdout and stderr', ['sh', '-c', '(sleep 100 >&1 2>&2 &); sleep 100']],
    ['a process blocked reading stdin that is never closed', ['sh', '-c', 'read x; sleep 100']],
  ]
  for (const [what, argv] of terminating) {
    it(`exec always terminates: ${what}`, async () => {
      const t0 = Date.now()
      // stdin that is never closed: a stream the test keeps open.
      const stdin = what.includes('stdin') ? new PassThrough() : undefined
      const r = await sb.start(argv[0], argv.slice(1), { timeoutMs: 600, killGraceMs: 300, stdin }).wait()
      expect(r.timedOut).toBe(true)
      expect(Date.now() - t0).toBeLessThan(600 + 300 + 1000)
    })
  }

  it('exec always terminates: a fork bomb is stopped by the process limit and the timeout', async () => {
    const bomb = await rt.create({ image: 'base', driver: 'namespace', pidsMax: 64 })
    const t0 = Date.now()
    // The leader forks once, before the bomb fills the limit, then becomes sleep (exec, no fork):
    // a leader whose own fork failed would exit at once and leave its background bomb running
    // (a command's background processes outlive it), racing the next command for the limit.
    const r = await bomb.exec('sh', ['-c', 'sh -c "b() { b | b & }; b"; exec sleep 100'], {
      timeoutMs: 1500,
      killGraceMs: 300,
    })
    expect(r.timedOut).toBe(true)
    expect(Date.now() - t0).toBeLessThan(5000)
    const after = await bomb.exec('echo', ['alive'])
    // The whole result, so that a failure shows why (failReason, stderr).
    expect(after).toMatchObject({ stdout: 'alive\n', exitCode: 0 })
    await bomb.stop()
  })

  it('marks running commands killed/sandbox_destroyed when the sandbox stops under them', async () => {
    const s = await rt.create({ image: 'base', driver: 'namespace' })
    const c = s.start('sleep', ['30'])
    await c.started()
    await s.stop()
    const r = await c.wait()
    expect(r.status).toBe('killed')
    expect(r.killedReason).toBe('sandbox_destroyed')
  })

  it('rejects out-of-range options', () => {
    expect(() => sb.start('true', [], { timeoutMs: 0 })).toThrow(expect.objectContaining({ code: 'S003' }))
    expect(() => sb.start('true', [], { retainBytes: 10 })).toThrow(expect.objectContaining({ code: 'S003' }))
    expect(() => sb.start('true', [], { env: { krunbox_lower: 'x' } })).toThrow(
      expect.objectContaining({ code: 'S006' }),
    )
  })
})

describe('concurrency', () => {
  it('runs 50 concurrent commands in one sandbox with intact output', async () => {
    const results = await Promise.all(Array.from({ length: 50 }, (_, i) => sb.exec('sh', ['-c', `seq 1 ${1000 + i}`])))
    results.forEach((r, i) => expect(r.stdout).toBe(Array.from({ length: 1000 + i }, (_, k) => `${k + 1}\n`).join('')))
  })

  it('runs 10 sandboxes × 10 commands at once with intact output', async () => {
    const boxes = await Promise.all(Array.from({ length: 10 }, () => rt.create({ image: 'base', driver: 'namespace' })))
    const all = await Promise.all(
      boxes.flatMap((b, i) =>
        Array.from({ length: 10 }, (_, j) => b.exec('sh', ['-c', `echo ${i}-${j}; seq 1 500 | sha256sum`])),
      ),
    )
    const expectedSum = sha(Buffer.from(Array.from({ length: 500 }, (_, k) => `${k + 1}\n`).join('')))
    all.forEach((r, n) => {
      expect(r.stdout.split('\n')[0]).toBe(`${Math.floor(n / 10)}-${n % 10}`)
      expect(r.stdout.split('\n')[1].split(' ')[0]).toBe(expectedSum)
    })
    await Promise.all(boxes.map((b) => b.stop()))
  }, 60_000)
})

describe('keys, stop after start, aborted signals, log pages (issue 21)', () => {
  it('gives a retry with the same idempotency key, from a second handle and a second process, the same command; it runs once', async () => {
    const key = `key-${crypto.randomUUID()}`
    const script = `echo run >> /tmp/${key}; sleep 1; echo done`
    const first = sb.start('sh', ['-c', script], { idempotencyKey: key })
    await first.started()
    const second = await rt.attach(sb.id, { accessToken: sb.accessToken! })
    const retry = second.start('sh', ['-c', script], { idempotencyKey: key })
    expect(retry.id).toBe(first.id)
    const childOut = await new Promise<Record<string, string>>((resolve, reject) => {
      const args = [
        process.execPath,
        '--import',
        'tsx',
        path.resolve('test/fixtures/idempotent-child.ts'),
        runtimeState(rt).root,
        JSON.stringify({ id: sb.id, accessToken: sb.accessToken, key, script }),
      ]
      execFile(args[0], args.slice(1), { timeout: 60_000, env: { ...process.env, HOME: '/tmp' } }, (err, stdout) => {
        try {
          resolve(JSON.parse(stdout.trim().split('\n').pop() ?? ''))
        } catch {
          reject(err ?? new Error(`child printed ${stdout}`))
        }
      })
    })
    const [a, b] = await Promise.all([first.wait(), retry.wait()])
    expect(a.exitCode).toBe(0)
    expect(b.exitCode).toBe(0)
    expect(childOut).toEqual({ id: first.id, stdout: 'done\n', healthy: 'healthy\n' })
    // exec() takes the key too, and after the end a retry still gets the same (ended) command.
    const again = await second.exec('sh', ['-c', script], { idempotencyKey: key })
    expect(again.stdout).toBe('done\n')
    expect((await sb.exec('cat', [`/tmp/${key}`])).stdout).toBe('run\n')
    expect((await second.exec('echo', ['ok'])).stdout).toBe('ok\n')
    expect((await sb.exec('echo', ['ok'])).stdout).toBe('ok\n')
  })

  it(
    'reports a command started right before stop() as killed by the sandbox end, 100 times out of 100',
    { timeout: 300_000 },
    async () => {
      const outcomes: string[] = []
      for (let i = 0; i < 100; i++) {
        const s = await rt.create({ image: 'base', driver: 'namespace' })
        const cmd = s.start('sleep', ['100'])
        await s.stop()
        const r = await cmd.wait().catch((e: SandboxError) => ({ status: e.code, killedReason: null }))
        outcomes.push(`${r.status}/${r.killedReason}`)
      }
      expect(outcomes).toEqual(Array(100).fill('killed/sandbox_destroyed'))
    },
  )

  it('rejects exec and start with an already-aborted signal with S206', async () => {
    const signal = AbortSignal.abort()
    await expect(sb.exec('true', [], { signal })).rejects.toMatchObject({ code: 'S206' })
    expect(() => sb.start('true', [], { signal })).toThrow(expect.objectContaining({ code: 'S206' }))
  })

  it(
    'pages readLogs by bytes: every chunk size up to the largest the agent emits, no page over the frame cap, pages resume exactly',
    { timeout: 120_000 },
    async () => {
      for (const bs of [1024, 65536, 131072, 262144, 1048576]) {
        const total = 16 * 1024 * 1024
        const cmd = sb.start(
          'dd',
          ['if=/dev/urandom', 'of=/dev/stdout', `bs=${bs}`, `count=${total / bs}`, 'status=none'],
          { retainBytes: 32 * 1024 * 1024 },
        )
        const streamed: Buffer[] = []
        cmd.on('stdout', (d) => streamed.push(d))
        expect((await cmd.wait()).exitCode).toBe(0)
        const paged: Buffer[] = []
        let afterSeq = 0
        let pages = 0
        let largest = 0
        for (;;) {
          const page = await cmd.readLogs({ afterSeq })
          pages++
          expect(page.data.length).toBeGreaterThan(0)
          expect(page.data[0].seq).toBe(afterSeq + 1)
          for (let i = 1; i < page.data.length; i++) expect(page.data[i].seq).toBe(page.data[i - 1].seq + 1)
          const encoded = page.data.reduce((n, c) => n + Math.ceil(c.data.length / 3) * 4 + 128, 0)
          expect(encoded).toBeLessThanOrEqual(4 * 1024 * 1024)
          for (const c of page.data) largest = Math.max(largest, c.data.length)
          paged.push(...page.data.map((c) => c.data))
          afterSeq = page.nextSeq
          if (!page.hasMore) break
        }
        expect(sha(Buffer.concat(paged))).toBe(sha(Buffer.concat(streamed)))
        expect(Buffer.concat(paged).length).toBe(total)
        expect(pages).toBeGreaterThan(1)
        expect(largest).toBeLessThanOrEqual(256 * 1024)
        // The connection is still good after the big pages.
        expect((await sb.exec('echo', ['ok'])).stdout).toBe('ok\n')
      }
    },
  )

  it('reads the issue’s dd output in pages after it ended', async () => {
    const cmd = sb.start('dd', ['if=/dev/zero', 'bs=65536', 'count=128'])
    await cmd.wait()
    const page = await cmd.readLogs({ afterSeq: 0 })
    expect(page.data.length).toBeGreaterThan(0)
    expect(sb.status).toBe('idle')
    expect((await sb.exec('echo', ['ok'])).stdout).toBe('ok\n')
  })
})
