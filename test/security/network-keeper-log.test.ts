/**
 * A detached sandbox's network keeper logged every refusal to
 * network-keeper.log in the host's state directory, so a sandbox looping over refused lookups
 * grew it 1.7 MB/s, without end. Refusals are now logged one by one up to a few per window,
 * summarised beyond, and the file is cut before it passes its cap.
 * (Issue 28, item 10.)
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DenialLog } from '../../lib/network/denial-log.js'
import { runtimeState, type Runtime } from '../../lib/runtime.js'
import { testRuntime } from '../helpers/runtime.js'

let rt: Runtime
beforeAll(() => {
  rt = testRuntime()
})
afterAll(async () => {
  await rt.close()
})

describe("the network keeper's log", () => {
  it('keeper: a detached sandbox flooding refused lookups growing the host log without bound is held', async () => {
    const sb = await rt.create({
      image: 'base',
      driver: 'namespace',
      detached: true,
      network: { allow: ['only.test'] },
    })
    try {
      const lookups = 300
      const r = await sb.exec(
        'sh',
        ['-c', `i=0; while [ $i -lt ${lookups} ]; do nslookup n$i.refused.test >/dev/null 2>&1; i=$((i+1)); done`],
        { timeoutMs: 120_000 },
      )
      expect(r.exitCode).toBe(0)
      const dir = runtimeState(rt).sandboxDir(sb.id)
      // Each refusal is counted (before its answer is sent)...
      const usage = JSON.parse(fs.readFileSync(path.join(dir, 'network-usage.json'), 'utf8'))
      expect(usage.denied).toBeGreaterThanOrEqual(lookups)
      // ...but only a few per window are logged one by one.
      const lines = fs
        .readFileSync(path.join(dir, 'network-keeper.log'), 'utf8')
        .split('\n')
        .filter((l) => l.startsWith('denied {'))
      expect(lines.length).toBeGreaterThan(0)
      expect(lines.length).toBeLessThan(usage.denied / 4)
    } finally {
      await sb.stop()
    }
  })

  it('keeper: the log passing its byte cap over a long flood is held (summaries, then a cut)', () => {
    const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'kb-denial-log-')), 'network-keeper.log')
    const fd = fs.openSync(file, 'a')
    const log = new DenialLog(fd, { perWindow: 5, maxBytes: 8192 })
    try {
      // A long flood: 2 000 windows of 50 refusals each.
      for (let w = 0; w < 2000; w++) {
        for (let i = 0; i < 50; i++)
          log.record({ destination: `n${w}-${i}.refused.test`, reason: 'is not in the allow list', via: 'dns', at: 0 })
        log.endWindow()
        expect(fs.fstatSync(fd).size).toBeLessThanOrEqual(8192)
      }
      const text = fs.readFileSync(file, 'utf8')
      expect(text).toMatch(/^network-keeper\.log truncated at \d+ bytes/)
      expect(text).toContain('denied 45 more (45 destinations)')
    } finally {
      log.close()
      fs.closeSync(fd)
      fs.rmSync(path.dirname(file), { recursive: true, force: true })
    }
  })
})
