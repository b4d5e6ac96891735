/**
 * The newer calls under the load production puts on them: 64 at once (sb.pty, fs.writeFiles,
 * sb.url) and a long life of 10 000 calls (fs.writeFiles, sb.url) with every call counted and
 * the host heap flat after GC. Lean: seconds, one sandbox per test. (Issue 31.)
 */
import v8 from 'node:v8'
import vm from 'node:vm'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'

let rt: Runtime
let sb: Sandbox

beforeAll(async () => {
  rt = testRuntime()
  sb = await rt.create({ image: 'base', driver: 'namespace' })
})
afterAll(async () => {
  await rt.close()
})

v8.setFlagsFromString('--expose-gc')
const gc = vm.runInNewContext('gc') as () => void
async function heapAfterGc(): Promise<number> {
  for (let i = 0; i < 3; i++) {
    gc()
    await new Promise((r) => setImmediate(r))
  }
  return process.memoryUsage().heapUsed
}

describe('64 at once', () => {
  it('64 sb.pty sessions on one sandbox: each its own terminal of its own size, reading what was typed into it', async () => {
    const sessions = Array.from({ length: 64 }, (_, i) => {
      const term = sb.pty('sh', ['-c', 'echo ready; read x; echo "got-$x $(tty) $(stty size)"'], {
        cols: 80 + i,
        rows: 24,
      })
      let shown = ''
      const ready = new Promise<void>((resolve) =>
        term.on('data', (d) => {
          shown += d.toString()
          if (shown.includes('ready')) resolve()
        }),
      )
      return { term, ready, shown: () => shown }
    })
    // Every session is open and waiting for its line before any gets one.
    await Promise.all(sessions.map((s) => s.ready))
    sessions.forEach((s, i) => s.term.write(`${i}\r`))
    const ends = await Promise.all(sessions.map(async (s) => ({ result: await s.term.wait(), shown: s.shown() })))
    const ttys = new Set<string>()
    ends.forEach(({ result, shown }, i) => {
      expect(result.exitCode, shown).toBe(0)
      const m = shown.match(/got-(\d+) (\/dev\/pts\/\d+) (\d+ \d+)/)
      expect(m, shown).not.toBeNull()
      expect([m![1], m![3]]).toEqual([String(i), `24 ${80 + i}`])
      ttys.add(m![2])
    })
    // All 64 were open at once, so no two shared a terminal.
    expect(ttys.size).toBe(64)
  }, 60_000)

  it('64 fs.writeFiles batches at once (4 files each, one with parents): every file holds its own bytes and mode', async () => {
    const batches = Array.from({ length: 64 }, (_, i) =>
      sb.fs.writeFiles([
        { path: `/tmp/load/${i}/a`, data: `a${i}`, parents: true },
        { path: `/tmp/load/${i}/b`, data: Buffer.from(`b${i}`) },
        { path: `/tmp/load/${i}/c.sh`, data: `#!/bin/sh\necho c${i}\n`, mode: 0o750 },
        { path: `/tmp/load/${i}/d`, data: '' },
      ]),
    )
    const written = await Promise.all(batches)
    written.forEach((w, i) =>
      expect(w.map((e) => e.path)).toEqual(['a', 'b', 'c.sh', 'd'].map((n) => `/tmp/load/${i}/${n}`)),
    )
    const listing = await sb.exec('sh', [
      '-c',
      'for d in /tmp/load/*; do echo "$d $(cat $d/a) $(cat $d/b) $($d/c.sh) $(stat -c %a $d/c.sh) $(stat -c %s $d/d)"; done',
    ])
    const lines = listing.stdout.trim().split('\n').sort()
    expect(lines).toEqual(Array.from({ length: 64 }, (_, i) => `/tmp/load/${i} a${i} b${i} c${i} 750 0`).sort())
  }, 60_000)

  it('64 sb.url calls at once for 8 ports: one forward per port, each reaching its own server', async () => {
    const ports = Array.from({ length: 8 }, (_, i) => 8100 + i)
    const servers = ports.map((port) =>
      sb.start('sh', [
        '-c',
        `mkdir -p /tmp/www${port} && echo ${port} > /tmp/www${port}/port && exec httpd -f -p 127.0.0.1:${port} -h /tmp/www${port}`,
      ]),
    )
    try {
      // httpd listens before it serves; a probe from inside the sandbox waits for each port.
      const probe = ports.map((p) => `until wget -q -O /dev/null http://127.0.0.1:${p}/port; do :; done`).join('; ')
      expect((await sb.exec('sh', ['-c', probe], { timeoutMs: 30_000 })).exitCode).toBe(0)
      const urls = await Promise.all(Array.from({ length: 64 }, (_, i) => sb.url(ports[i % 8])))
      for (let i = 0; i < 64; i++) expect(urls[i]).toBe(urls[i % 8])
      expect(new Set(urls).size).toBe(8)
      const answers = await Promise.all(ports.map(async (_, i) => (await fetch(new URL('port', urls[i]))).text()))
      expect(answers).toEqual(ports.map((p) => `${p}\n`))
      expect(sb.services.map((s) => s.port).sort()).toEqual(ports)
    } finally {
      await Promise.all(servers.map((s) => s.kill('SIGKILL').catch(() => {})))
    }
  }, 60_000)
})

describe('a long life: 10 000 calls', () => {
  it('10 000 fs.writeFiles calls on one sandbox: every write lands, the host heap after GC grows less than 2 MiB from the first 1 000 to the last', async () => {
    const round = async (from: number, to: number) => {
      for (let i = from; i < to; i++)
        await sb.fs.writeFiles([{ path: `/tmp/life/${i % 50}`, data: String(i), parents: true }])
    }
    await round(0, 1000)
    const after1000 = await heapAfterGc()
    await round(1000, 10_000)
    const after10000 = await heapAfterGc()
    // The last 50 writes are 9950..9999, one per file.
    const contents = await sb.exec('sh', ['-c', 'for f in /tmp/life/*; do cat $f; echo; done | sort -n | tr "\\n" " "'])
    expect(contents.stdout.trim()).toBe(Array.from({ length: 50 }, (_, i) => 9950 + i).join(' '))
    expect(after10000 - after1000).toBeLessThan(2 * 1024 * 1024)
  }, 180_000)

  it('10 000 sb.url calls for one port: the same URL every time, one forward, the host heap flat after GC', async () => {
    const server = sb.start('sh', [
      '-c',
      'mkdir -p /tmp/w && echo life > /tmp/w/x && exec httpd -f -p 127.0.0.1:8200 -h /tmp/w',
    ])
    try {
      expect(
        (await sb.exec('sh', ['-c', 'until wget -q -O /dev/null http://127.0.0.1:8200/x; do :; done'])).exitCode,
      ).toBe(0)
      const first = await sb.url(8200)
      const round = async (n: number) => {
        for (let i = 0; i < n; i++) if ((await sb.url(8200)) !== first) throw new Error(`call ${i} gave another URL`)
      }
      await round(1000)
      const after1000 = await heapAfterGc()
      await round(9000)
      const after10000 = await heapAfterGc()
      expect(sb.services.filter((s) => s.port === 8200)).toHaveLength(1)
      expect(await (await fetch(new URL('x', first))).text()).toBe('life\n')
      expect(after10000 - after1000).toBeLessThan(2 * 1024 * 1024)
    } finally {
      await server.kill('SIGKILL').catch(() => {})
    }
  }, 120_000)
})
