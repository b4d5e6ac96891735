/**
 * A hostile cell cannot make the host hold unbounded memory (issue 42). The cell runs as the
 * bridge's uid, so it can write whatever it likes into the bridge's stdout (/proc/<bridge>/fd/1)
 * with the id of its own execution (its request's msg_id): a 1 GiB "PNG" on one line, a million
 * displays, a stream that never ends. The host reads every line against the execution's caps
 * (maxOutputBytes, maxOutputMessages), drops and counts the rest, and says so in
 * execution.truncated; its memory stays flat.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import type { Execution } from '../../lib/code/types.js'
import { codeImage } from '../helpers/code-image.js'
import { testRuntime } from '../helpers/runtime.js'

let rt: Runtime
let sb: Sandbox
beforeAll(async () => {
  rt = testRuntime()
  sb = await rt.create({ image: await codeImage(rt), memoryMb: 1024 })
  await sb.runCode('1')
}, 600_000)
afterAll(async () => {
  await rt?.close()
})

const MIB = 1024 * 1024

/**
 * Python: `forge_raw(bytes)` writes straight into the bridge's stdout, as this cell's own output.
 * The pipe is the agent's (0600 root), so the cell takes the bridge's descriptor itself with
 * pidfd_getfd, which the same uid may do to its parent.
 */
const FORGE = `
import ctypes, os
_libc = ctypes.CDLL(None, use_errno=True)
_pidfd = _libc.syscall(434, os.getppid(), 0)
_out = _libc.syscall(438, _pidfd, 1, 0)
assert _pidfd >= 0 and _out >= 0, os.strerror(ctypes.get_errno())
_cell = get_ipython().parent_header["header"]["msg_id"]
def forge_raw(data):
    view = memoryview(data)
    while view:
        view = view[os.write(_out, view):]
def display_line(data):
    return ('{"t":"display","id":"%s","main":false,"data":{"text/plain":"%s"}}\\n' % (_cell, data)).encode()
`

/** Runs the cell while sampling the host's resident memory; the execution and the peak growth in bytes. */
async function withPeakRss(run: () => Promise<Execution>): Promise<{ execution: Execution; growth: number }> {
  globalThis.gc?.()
  const base = process.memoryUsage.rss()
  let peak = base
  const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage.rss())), 20)
  try {
    const execution = await run()
    peak = Math.max(peak, process.memoryUsage.rss())
    return { execution, growth: peak - base }
  } finally {
    clearInterval(sampler)
  }
}

describe('output caps against a hostile cell', () => {
  it('a 1 GiB image on one line of the bridge is skipped to its newline, never held: the cap is reported', async () => {
    const { execution, growth } = await withPeakRss(() =>
      sb.runCode(
        FORGE +
          `
forge_raw(('{"t":"display","id":"%s","main":false,"data":{"image/png":"' % _cell).encode())
block = b"iVBORw0KGgo" * (1 << 17)
for _ in range(1024 * 1024 * 1024 // len(block) + 1):
    forge_raw(block)
forge_raw(b'"}}\\n')
print("after")
`,
        { timeoutMs: 120_000 },
      ),
    )
    expect(execution.error).toBeNull()
    expect(execution.results).toEqual([])
    // The line, and the print after it (once something was dropped, later outputs are too).
    expect(execution.truncated).toMatchObject({ cap: 'maxOutputBytes', droppedMessages: 2 })
    expect(execution.truncated!.droppedBytes).toBeGreaterThan(1024 * MIB)
    // The first part kept is the only part: nothing after the dropped line, in order.
    expect(execution.logs.stdout).toEqual([])
    // Well under the line (without the cap the host would hold all of it, twice as a string).
    expect(growth).toBeLessThan(256 * MIB)
  })

  it('a million displays are capped at maxOutputMessages (default 100 000) and counted', async () => {
    const { execution, growth } = await withPeakRss(() =>
      sb.runCode(
        FORGE +
          `
line = display_line("x")
batch = line * 10000
for _ in range(100):
    forge_raw(batch)
`,
        { timeoutMs: 120_000 },
      ),
    )
    expect(execution.results).toHaveLength(100_000)
    expect(execution.truncated).toEqual({
      cap: 'maxOutputMessages',
      droppedMessages: 900_000,
      droppedBytes: expect.any(Number),
    })
    expect(growth).toBeLessThan(256 * MIB)
  })

  it('a stream that never ends is cut at maxOutputBytes; the timeout still interrupts it', async () => {
    const execution = await sb.runCode('while True:\n    print("y" * 1000)', {
      timeoutMs: 3_000,
      maxOutputBytes: MIB,
    })
    expect(execution.timedOut).toBe(true)
    expect(execution.error?.name).toBe('KeyboardInterrupt')
    expect(execution.truncated?.cap).toBe('maxOutputBytes')
    // Whole messages are kept or dropped (ipykernel sends a burst of prints as one): at most the cap.
    const kept = execution.logs.stdout.reduce((n, s) => n + s.length, 0)
    expect(kept).toBeLessThanOrEqual(MIB)
    expect(execution.truncated!.droppedBytes).toBeGreaterThan(MIB)
  })

  it('an honest display over the cap is dropped in the sandbox already (the bridge counts it too)', async () => {
    const execution = await sb.runCode('display({"image/png": "A" * (8 << 20)}, raw=True)\nprint("done")', {
      maxOutputBytes: MIB,
    })
    expect(execution.results).toEqual([])
    expect(execution.truncated).toMatchObject({ cap: 'maxOutputBytes', droppedMessages: 2 })
    expect(execution.truncated!.droppedBytes).toBeGreaterThan(8 * MIB)
  })
})
