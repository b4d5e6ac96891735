/** The filesystem operations, executed by the agent inside a real sandbox. (Issue 4.) */
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Readable } from 'node:stream'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'

let rt: Runtime
let sb: Sandbox

beforeAll(async () => {
  rt = testRuntime()
  sb = await rt.create({ image: 'base', driver: 'namespace', diskMb: 3072, memoryMb: 4096 })
})
afterAll(async () => {
  await rt.close()
})

const sha = (b: Buffer) => crypto.createHash('sha256').update(b).digest('hex')

async function code(p: Promise<unknown>): Promise<{ code: string; message: string }> {
  const err = await p.then(
    () => null,
    (e) => e,
  )
  expect(err).toBeInstanceOf(SandboxError)
  return err
}

describe('the ten operations and their errors', () => {
  it('mkdir, ls, stat, writeFile, readFile, mv, chmod, rm', async () => {
    expect(await sb.fs.mkdir('/workspace/t1/a/b', { parents: true })).toEqual({ created: true })
    expect(await sb.fs.mkdir('/workspace/t1/a/b', { parents: true })).toEqual({ created: false })
    await sb.fs.writeFile('/workspace/t1/a/hello.txt', 'hello\n')
    const entries = await sb.fs.ls('/workspace/t1/a')
    expect(entries.map((e) => [e.name, e.isDir]).sort()).toEqual([
      ['b', true],
      ['hello.txt', false],
    ])
    const st = await sb.fs.stat('/workspace/t1/a/hello.txt')
    expect(st).toMatchObject({ name: 'hello.txt', isDir: false, isSymlink: false, size: 6 })
    expect(st.mode & 0o777).toBe(0o644)
    expect(st.mtime).toBeGreaterThan(Date.now() - 60_000)
    const read = await sb.fs.readFile('/workspace/t1/a/hello.txt')
    expect(read.data.toString()).toBe('hello\n')
    expect(read.size).toBe(6)
    // Commands see what fs operations did.
    expect((await sb.exec('cat', ['/workspace/t1/a/hello.txt'])).stdout).toBe('hello\n')
    await sb.fs.mv('/workspace/t1/a/hello.txt', '/workspace/t1/hello2.txt')
    expect((await code(sb.fs.stat('/workspace/t1/a/hello.txt'))).code).toBe('S211')
    expect(await sb.fs.chmod('/workspace/t1/hello2.txt', { mode: 0o600 })).toEqual({ updated: 1 })
    expect((await sb.fs.stat('/workspace/t1/hello2.txt')).mode & 0o777).toBe(0o600)
    expect((await sb.fs.chmod('/workspace/t1', { mode: '0755', recursive: true })).updated).toBe(4)
    await sb.fs.rm('/workspace/t1', { recursive: true })
    expect((await code(sb.fs.ls('/workspace/t1'))).code).toBe('S211')
  })

  it('answers every error code of the S21x band with the offending path', async () => {
    await sb.fs.mkdir('/workspace/e/full', { parents: true })
    await sb.fs.writeFile('/workspace/e/full/f', 'x')
    const cases: Array<[string, () => Promise<unknown>, string, string]> = [
      ['relative path', () => sb.fs.ls('workspace'), 'S210', 'workspace'],
      ['ls of a missing dir', () => sb.fs.ls('/workspace/e/none'), 'S211', '/workspace/e/none'],
      ['ls of a file', () => sb.fs.ls('/workspace/e/full/f'), 'S212', '/workspace/e/full/f'],
      ['read of a directory', () => sb.fs.readFile('/workspace/e/full'), 'S212', '/workspace/e/full'],
      ['mkdir without parents', () => sb.fs.mkdir('/workspace/e/x/y'), 'S211', '/workspace/e/x'],
      ['mkdir of an existing path', () => sb.fs.mkdir('/workspace/e/full'), 'S213', '/workspace/e/full'],
      [
        'mv onto an existing path',
        () => sb.fs.mv('/workspace/e/full/f', '/workspace/e/full'),
        'S213',
        '/workspace/e/full',
      ],
      ['rm of a non-empty dir', () => sb.fs.rm('/workspace/e/full'), 'S214', '/workspace/e/full'],
      [
        'write into a 0555 directory',
        () => sb.fs.mkdir('/workspace/e/ro', { mode: 0o555 }).then(() => sb.fs.writeFile('/workspace/e/ro/x', 'x')),
        'S215',
        '/workspace/e/ro',
      ],
      [
        'grep with a bad regex',
        () => sb.fs.grep('/workspace/e', '(unclosed', { recursive: true }),
        'S217',
        '(unclosed',
      ],
      [
        'sed with both forms',
        () => sb.fs.sed({ files: ['/workspace/e/full/f'], path: '/workspace/e' } as never, 'x', 'y'),
        'S210',
        'both',
      ],
      ['sed with neither form', () => sb.fs.sed({} as never, 'x', 'y'), 'S210', 'neither'],
    ]
    for (const [what, call, c, named] of cases) {
      const err = await code(call())
      expect(`${what}: ${err.code}`).toBe(`${what}: ${c}`)
      expect(err.message).toContain(named)
    }
    expect((await sb.fs.ls('/workspace/e/full')).length).toBe(1) // the failed rm preserved it
  })

  it('returns an I/O error (S216) when the writable layer is full', async () => {
    const small = await rt.create({ image: 'base', driver: 'namespace', diskMb: 16 })
    const err = await code(small.fs.writeFile('/workspace/big', Buffer.alloc(40 * 1024 * 1024)))
    expect(err.code).toBe('S216')
    expect(err.message).toContain('/workspace/big')
    await small.stop()
  })
})

describe('round trips', () => {
  for (const [name, bytes] of [
    ['empty', Buffer.alloc(0)],
    ['1 byte', Buffer.from([0xff])],
    ['16 KiB patterned', Buffer.from(Array.from({ length: 16384 }, (_, i) => (i * 31 + 7) & 0xff))],
  ] as const) {
    it(`${name} file, byte-exact`, async () => {
      await sb.fs.writeFile(`/workspace/rt-${bytes.length}`, bytes)
      const back = await sb.fs.readFile(`/workspace/rt-${bytes.length}`)
      expect(sha(back.data)).toBe(sha(bytes))
      expect((await sb.exec('sha256sum', [`/workspace/rt-${bytes.length}`])).stdout.split(' ')[0]).toBe(sha(bytes))
    })
  }

  it('1 GiB file both ways with hashes, host RSS flat', async () => {
    const GiB = 1024 * 1024 * 1024
    const block = crypto.randomBytes(1024 * 1024)
    let sent = 0
    const upHash = crypto.createHash('sha256')
    const source = new Readable({
      read() {
        if (sent >= GiB) return this.push(null)
        const piece = Buffer.from(block)
        piece.writeUInt32BE(sent / block.length, 0)
        sent += piece.length
        upHash.update(piece)
        this.push(piece)
      },
    })
    const rss0 = process.memoryUsage().rss
    let peak = rss0
    const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 50)
    try {
      await sb.fs.writeFile('/workspace/gig', source)
      const inside = (await sb.exec('sha256sum', ['/workspace/gig'], { timeoutMs: 120_000 })).stdout.split(' ')[0]
      const digest = upHash.digest('hex')
      expect(inside).toBe(digest)
      const { stream, size } = await sb.fs.createReadStream('/workspace/gig')
      expect(size).toBe(GiB)
      const downHash = crypto.createHash('sha256')
      for await (const piece of stream) downHash.update(piece as Buffer)
      expect(downHash.digest('hex')).toBe(digest)
    } finally {
      clearInterval(sampler)
      await sb.fs.rm('/workspace/gig').catch(() => {})
    }
    expect(peak - rss0).toBeLessThan(200 * 1024 * 1024)
  }, 240_000)

  it('uploads and downloads host files and directory trees (tar streams)', async () => {
    const host = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-up-'))
    fs.mkdirSync(path.join(host, 'src/sub'), { recursive: true })
    fs.writeFileSync(path.join(host, 'src/a.txt'), 'A')
    fs.writeFileSync(path.join(host, 'src/sub/b.bin'), crypto.randomBytes(100_000))
    fs.symlinkSync('a.txt', path.join(host, 'src/link'))
    await sb.fs.upload(path.join(host, 'src'), '/workspace/tree')
    expect((await sb.exec('sh', ['-c', 'cat /workspace/tree/a.txt; readlink /workspace/tree/link'])).stdout).toBe(
      'Aa.txt\n',
    )
    await sb.fs.download('/workspace/tree', path.join(host, 'back'))
    expect(
      fs.readFileSync(path.join(host, 'back/sub/b.bin')).equals(fs.readFileSync(path.join(host, 'src/sub/b.bin'))),
    ).toBe(true)
    expect(fs.readlinkSync(path.join(host, 'back/link'))).toBe('a.txt')
    await sb.fs.upload(path.join(host, 'src/a.txt'), '/workspace/single.txt')
    await sb.fs.download('/workspace/single.txt', path.join(host, 'single.txt'))
    expect(fs.readFileSync(path.join(host, 'single.txt'), 'utf8')).toBe('A')
    fs.rmSync(host, { recursive: true })
  })
})

describe('the writable layer', () => {
  // Its tmpfs asks for large folios (huge=within_size) where the kernel has THP; the
  // pitfall to guard against is huge=always, which spends 2 MiB on every small file.
  it('charges a small file its own size, not a huge page', async () => {
    const used = async () =>
      Number((await sb.exec('sh', ['-c', "df -k /workspace | awk 'NR==2 {print $3}'"])).stdout.trim())
    await sb.fs.mkdir('/workspace/small-cost', { parents: true })
    const before = await used()
    for (let i = 0; i < 40; i++) await sb.fs.writeFile(`/workspace/small-cost/${i}`, Buffer.alloc(4096, i))
    const grewKb = (await used()) - before
    expect(grewKb).toBeGreaterThanOrEqual(40 * 4)
    expect(grewKb).toBeLessThan(40 * 64)
    if (fs.existsSync('/sys/kernel/mm/transparent_hugepage')) {
      expect((await sb.exec('grep', [' /tmp ', '/proc/mounts'])).stdout).toContain('huge=within_size')
    }
    await sb.fs.rm('/workspace/small-cost', { recursive: true })
  })
})

describe('directory uploads take the same options as file uploads (issue 21 item 8)', () => {
  const tree = () => {
    const host = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-updir-'))
    fs.mkdirSync(path.join(host, 'sub'))
    fs.writeFileSync(path.join(host, 'a'), 'A'.repeat(1000))
    fs.writeFileSync(path.join(host, 'sub/b'), 'B'.repeat(2345))
    fs.symlinkSync('a', path.join(host, 'link'))
    return host
  }

  it('returns the bytes of file content sent, applies mode to the directory, and needs parents for a missing parent', async () => {
    const host = tree()
    const missing = await code(sb.fs.upload(host, '/workspace/no-such-parent/dir'))
    expect(missing.code).toBe('S211')
    const up = await sb.fs.upload(host, '/workspace/no-such-parent/dir', { parents: true, mode: '0700' })
    expect(up).toEqual({ bytes: 3345 })
    expect((await sb.fs.stat('/workspace/no-such-parent/dir')).mode & 0o777).toBe(0o700)
    expect((await sb.exec('cat', ['/workspace/no-such-parent/dir/sub/b'])).stdout).toBe('B'.repeat(2345))
    fs.rmSync(host, { recursive: true })
  })

  it('rejects unknown keys and bad option values before sending anything', async () => {
    const host = tree()
    const bad: [unknown, string][] = [
      [{ recursive: true }, 'S001'],
      [{ mode: 'rwx' }, 'S210'],
      [{ parents: 'yes' }, 'S001'],
      [{ signal: 'abort' }, 'S001'],
      ['opts', 'S001'],
    ]
    for (const [options, expected] of bad) {
      expect((await code(sb.fs.upload(host, '/workspace/never', options as never))).code).toBe(expected)
    }
    expect((await sb.exec('ls', ['/workspace/never'])).exitCode).not.toBe(0)
    fs.rmSync(host, { recursive: true })
  })

  it('an already-aborted signal is S206 for writeFile and both kinds of upload; nothing is written', async () => {
    const host = tree()
    const signal = AbortSignal.abort(new Error('changed my mind'))
    for (const p of [
      sb.fs.writeFile('/workspace/aborted', 'x', { signal }),
      sb.fs.upload(host, '/workspace/aborted', { signal }),
      sb.fs.upload(path.join(host, 'a'), '/workspace/aborted', { signal }),
    ]) {
      const err = await code(p)
      expect(err.code).toBe('S206')
    }
    expect((await sb.exec('ls', ['/workspace/aborted'])).exitCode).not.toBe(0)
    fs.rmSync(host, { recursive: true })
  })

  it('a directory upload aborted half way is S218 and leaves nothing behind', async () => {
    const host = tree()
    // A large (sparse) file keeps the upload busy long enough to abort it in flight.
    fs.writeFileSync(path.join(host, 'big'), '')
    fs.truncateSync(path.join(host, 'big'), 1024 ** 3)
    const ac = new AbortController()
    const upload = code(sb.fs.upload(host, '/workspace/aborted-dir', { signal: ac.signal }))
    // Abort once the agent is writing the big file: the extraction is then half done.
    const writingBig = async () =>
      (await sb.fs.ls('/workspace/aborted-dir').catch(() => [])).some((e) => e.name.startsWith('.big.krunbox-tmp-'))
    while (!(await writingBig()));
    ac.abort()
    const err = await upload
    expect(err.code).toBe('S218')
    // The rejection comes after the agent's rollback, so nothing is left to see at once.
    expect((await sb.exec('ls', ['/workspace/aborted-dir'])).exitCode).not.toBe(0)
    fs.rmSync(host, { recursive: true })
  }, 60_000)
})

describe('atomicity', () => {
  it('an upload whose source fails half way leaves the old bytes and no temp file (S218, retryable)', async () => {
    await sb.fs.writeFile('/workspace/keep.txt', 'original')
    let n = 0
    const failing = new Readable({
      read() {
        n++
        if (n < 20) this.push(Buffer.alloc(256 * 1024, 1))
        else this.destroy(new Error('disk on fire'))
      },
    })
    const err = await code(sb.fs.writeFile('/workspace/keep.txt', failing))
    expect(err.code).toBe('S218')
    expect((err as SandboxError).retryable).toBe(true)
    expect((await sb.fs.readFile('/workspace/keep.txt')).data.toString()).toBe('original')
    expect((await sb.fs.ls('/workspace')).map((e) => e.name).filter((n) => n.includes('keep.txt'))).toEqual([
      'keep.txt',
    ])
  })

  it('an upload aborted by the caller half way leaves the old bytes and no temp file', async () => {
    await sb.fs.writeFile('/workspace/keep2.txt', 'original')
    const ac = new AbortController()
    // Endless: it aborts the upload itself once 1 MiB is on its way.
    let pushed = 0
    const endless = new Readable({
      read() {
        if ((pushed += 64 * 1024) === 1024 * 1024) ac.abort()
        setImmediate(() => this.push(Buffer.alloc(64 * 1024, 2)))
      },
    })
    const err = await code(sb.fs.writeFile('/workspace/keep2.txt', endless, { signal: ac.signal }))
    expect(err.code).toBe('S218')
    // The rejection comes after the agent removed its temp file: no wait needed.
    expect((await sb.fs.readFile('/workspace/keep2.txt')).data.toString()).toBe('original')
    expect((await sb.exec('sh', ['-c', 'ls -a /workspace | grep keep2'])).stdout).toBe('keep2.txt\n')
  })
})

describe('concurrency', () => {
  it('64 uploads aborted at once, each at its own point, all reject S218 after their cleanup; the old bytes stay and the connection serves on', async () => {
    await sb.fs.mkdir('/workspace/aborts', { parents: true })
    const names = Array.from({ length: 64 }, (_, i) => `/workspace/aborts/f${i}`)
    await Promise.all(names.map((n) => sb.fs.writeFile(n, 'original')))
    const errors = await Promise.all(
      names.map((n, i) => {
        const ac = new AbortController()
        let chunks = 0
        const source = new Readable({
          read() {
            if (++chunks === 1 + (i % 8)) ac.abort()
            setImmediate(() => this.push(Buffer.alloc(32 * 1024, i)))
          },
        })
        return code(sb.fs.writeFile(n, source, { signal: ac.signal }))
      }),
    )
    expect(errors.map((e) => e.code)).toEqual(names.map(() => 'S218'))
    const left = (await sb.fs.ls('/workspace/aborts')).map((e) => e.name).sort()
    expect(left).toEqual(names.map((n) => path.posix.basename(n)).sort())
    const contents = await Promise.all(names.map(async (n) => (await sb.fs.readFile(n)).data.toString()))
    expect(new Set(contents)).toEqual(new Set(['original']))
    await expect(sb.fs.writeFile('/workspace/aborts/after', 'fine')).resolves.toEqual({ bytes: 4 })
  })

  it('concurrent writes and a grep do not wait for a long-running command', async () => {
    await sb.fs.mkdir('/workspace/conc', { parents: true })
    const long = sb.start('sleep', ['5'])
    const t0 = Date.now()
    await Promise.all(Array.from({ length: 20 }, (_, i) => sb.fs.writeFile(`/workspace/conc/f${i}`, `needle ${i}\n`)))
    const g = await sb.fs.grep('/workspace/conc', 'needle \\d+', { recursive: true })
    expect(g.matches.length).toBe(20)
    expect(Date.now() - t0).toBeLessThan(2000)
    await long.cancel({ mode: 'force' })
  })
})

describe('symlinks and permissions', () => {
  it('operates on links, never their targets, including links pointing outside the root', async () => {
    await sb.exec('sh', [
      '-c',
      'mkdir -p /workspace/ln && echo t > /workspace/ln/target && ln -s /workspace/ln/target /workspace/ln/link && ln -s /etc/../../../../host-secret /workspace/ln/out',
    ])
    const ls = await sb.fs.ls('/workspace/ln')
    expect(ls.find((e) => e.name === 'link')).toMatchObject({ isSymlink: true })
    expect(ls.find((e) => e.name === 'out')).toMatchObject({ isSymlink: true })
    expect((await sb.fs.stat('/workspace/ln/out')).isSymlink).toBe(true)
    await sb.fs.chmod('/workspace/ln/link', { mode: 0o600 })
    expect((await sb.fs.stat('/workspace/ln/target')).mode & 0o777).toBe(0o644)
    await sb.fs.mv('/workspace/ln/link', '/workspace/ln/link2')
    expect((await sb.exec('readlink', ['/workspace/ln/link2'])).stdout).toBe('/workspace/ln/target\n')
    await sb.fs.rm('/workspace/ln/link2')
    expect((await sb.fs.readFile('/workspace/ln/target')).data.toString()).toBe('t\n')
    expect((await code(sb.fs.readFile('/workspace/ln/out'))).code).toMatch(/S211|S212/)
  })

  it('denies what the unprivileged workload user may not do (S215)', async () => {
    await sb.fs.writeFile('/workspace/locked', 'secret', { mode: 0o000 })
    expect((await code(sb.fs.readFile('/workspace/locked'))).code).toBe('S215')
    const r = await sb.exec('cat', ['/workspace/locked'])
    expect(r.exitCode).not.toBe(0)
  })
})

describe('grep and sed', () => {
  it('matches the seed examples: globs, 1-based lines, binary skip, truncation, maxMatches', async () => {
    await sb.fs.mkdir('/workspace/g/target', { parents: true })
    await sb.fs.writeFile('/workspace/g/a.rs', 'fn a() {}\n// TODO(ann): fix\n')
    await sb.fs.writeFile('/workspace/g/b.py', '# TODO(bob): later\n' + 'x'.repeat(10000) + ' TODO(long): y\n')
    await sb.fs.writeFile('/workspace/g/c.txt', 'TODO(c): not included\n')
    await sb.fs.writeFile('/workspace/g/target/d.rs', '// TODO(d): excluded\n')
    await sb.fs.writeFile('/workspace/g/bin.rs', Buffer.concat([Buffer.from('TODO(bin): x\n'), Buffer.from([0, 1, 2])]))
    const r = await sb.fs.grep('/workspace/g', 'TODO\\(.+\\):', {
      recursive: true,
      include: ['*.rs', '*.py'],
      exclude: ['target'],
    })
    const found = r.matches.map((m) => `${m.path}:${m.line}`).sort()
    expect(found).toEqual(['/workspace/g/a.rs:2', '/workspace/g/b.py:1', '/workspace/g/b.py:2'])
    const long = r.matches.find((m) => m.line === 2 && m.path.endsWith('b.py'))!
    expect(Buffer.byteLength(long.content)).toBeLessThan(4200)
    expect(r.truncated).toBe(false)
    const capped = await sb.fs.grep('/workspace/g', 'todo', { recursive: true, ignoreCase: true, maxMatches: 2 })
    expect(capped.matches.length).toBe(2)
    expect(capped.truncated).toBe(true)
  })

  it('sed replaces with $1 references, firstOnly, literal mode, and per-file errors', async () => {
    await sb.fs.mkdir('/workspace/s', { parents: true })
    await sb.fs.writeFile('/workspace/s/a.txt', 'foo=1 foo=2\nbar\n')
    await sb.fs.writeFile('/workspace/s/b.txt', 'a.b a.b\n')
    const r1 = await sb.fs.sed({ files: ['/workspace/s/a.txt', '/workspace/s/missing.txt'] }, '(\\w+)=(\\d)', '$2:$1')
    expect(r1.totalReplacements).toBe(2)
    expect(r1.results.find((x) => x.path.endsWith('a.txt'))).toMatchObject({ replacements: 2, success: true })
    expect(r1.results.find((x) => x.path.endsWith('missing.txt'))).toMatchObject({ success: false })
    expect((await sb.fs.readFile('/workspace/s/a.txt')).data.toString()).toBe('1:foo 2:foo\nbar\n')
    const r2 = await sb.fs.sed({ path: '/workspace/s', include: '*.txt' }, 'a.b', 'X', {
      regex: false,
      firstOnly: true,
    })
    expect(r2.totalReplacements).toBe(1)
    expect((await sb.fs.readFile('/workspace/s/b.txt')).data.toString()).toBe('X a.b\n')
    const before = (await sb.fs.readFile('/workspace/s/a.txt')).data.toString()
    expect((await code(sb.fs.sed({ path: '/workspace/s' }, '([', 'x'))).code).toBe('S217')
    expect((await sb.fs.readFile('/workspace/s/a.txt')).data.toString()).toBe(before)
  })

  it('greps and seds a tree of 10 000 files', async () => {
    const script =
      "mkdir -p /workspace/big && cd /workspace/big && i=0; while [ $i -lt 100 ]; do mkdir d$i; j=0; while [ $j -lt 100 ]; do printf 'line one\\nvalue %s.%s here\\n' $i $j > d$i/f$j.txt; j=$((j+1)); done; i=$((i+1)); done"
    await sb.exec('sh', ['-c', script], { timeoutMs: 120_000 })
    const g = await sb.fs.grep('/workspace/big', 'value \\d+\\.\\d+', { recursive: true })
    expect(g.matches.length).toBe(10_000)
    expect(g.truncated).toBe(false)
    expect(g.matches.every((m) => m.line === 2)).toBe(true)
    const s = await sb.fs.sed({ path: '/workspace/big' }, 'value (\\d+)\\.(\\d+)', 'v$2/$1')
    expect(s.totalReplacements).toBe(10_000)
    expect((await sb.fs.readFile('/workspace/big/d7/f42.txt')).data.toString()).toBe('line one\nv42/7 here\n')
  }, 120_000)
})
