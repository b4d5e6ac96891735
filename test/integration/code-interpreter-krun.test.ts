/**
 * sb.runCode under the krun driver, with the libkrun TEST DOUBLE (test/fixtures/libkrun-double)
 * in place of libkrun: the double runs the real agent as the guest's PID 1 in VM mode, in
 * namespaces standing in for the guest. It proves the code interpreter needs nothing of the
 * namespace driver (its bridge is an ordinary command of the agent), not that a VM boots.
 * (Issue 42: both drivers.)
 */
import fs from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { hostProbe } from '../../lib/probe.js'
import { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { libkrunDoublePath, libkrunfwDoubleDir } from '../fixtures/libkrun-double/index.js'
import { codeImage } from '../helpers/code-image.js'
import { SHARED_CACHE } from '../images/helpers.js'
import { ensureNativeBuilt, makeTempDir } from '../native/helpers.js'
import { restoreEnv } from '../helpers/env.js'

const tmp = makeTempDir('krunbox-code-krun-')
const savedEnv = { ...process.env }
let rt: Runtime
let sb: Sandbox

beforeAll(async () => {
  ensureNativeBuilt()
  process.env.KRUNBOX_KRUN_ASSUME_USABLE = '1'
  process.env.KRUNBOX_LIBKRUN_PATH = libkrunDoublePath
  process.env.LD_LIBRARY_PATH = libkrunfwDoubleDir
  // The shim (and so the double) runs as the sandbox's ids: its call log must be theirs to write.
  fs.chmodSync(tmp.dir, 0o755)
  const log = path.join(tmp.dir, 'calls.jsonl')
  fs.writeFileSync(log, '', { mode: 0o666 })
  fs.chmodSync(log, 0o666)
  process.env.KRUN_DOUBLE_LOG = log
  hostProbe({ refresh: true })
  rt = new Runtime({ stateDir: path.join(tmp.dir, 'state'), cacheDir: SHARED_CACHE })
  sb = await rt.create({ driver: 'krun', image: await codeImage(rt), memoryMb: 1024 })
}, 600_000)
afterAll(async () => {
  await rt?.close()
  restoreEnv(savedEnv)
  hostProbe({ refresh: true })
  tmp.cleanup()
})

describe('runCode under the krun driver (libkrun test double)', () => {
  it('keeps Python state between cells, returns a PNG and an error as results', async () => {
    expect(sb.driver).toBe('krun')
    expect((await sb.runCode('x = 20')).error).toBeNull()
    const used = await sb.runCode('x + 22')
    expect(used.results.find((r) => r.isMainResult)?.text).toBe('42')
    const plot = await sb.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()')
    const png = plot.results.find((r) => r.png !== undefined)?.png
    expect(png!.subarray(1, 4).toString()).toBe('PNG')
    expect((await sb.runCode('1 / 0')).error?.name).toBe('ZeroDivisionError')
  }, 300_000)
})
