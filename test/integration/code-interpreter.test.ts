/**
 * sb.runCode in Python (issue 42): the AI-agent loop of the issue (a variable kept between cells,
 * a matplotlib figure as PNG bytes, a DataFrame as HTML, a traceback, a cell past its timeout
 * and the state after it, a restart), streaming while a cell runs, contexts, a kernel that dies,
 * an abort, and the errors of bad input. One sandbox for the file; the kernel is Debian's ipykernel.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import type { CodeEvent, CodeResult } from '../../lib/code/types.js'
import { codeImage } from '../helpers/code-image.js'
import { processesMentioning, testRuntime } from '../helpers/runtime.js'

let rt: Runtime
let sb: Sandbox
beforeAll(async () => {
  rt = testRuntime()
  sb = await rt.create({ image: await codeImage(rt), memoryMb: 1024 })
}, 600_000)
afterAll(async () => {
  const id = sb?.id
  await rt?.close()
  if (id) expect(processesMentioning(id)).toEqual([])
})

const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])

describe('the agent loop in Python', () => {
  it('keeps state, plots, shows a DataFrame, raises, survives a timeout, and forgets everything on restart', async () => {
    const defined = await sb.runCode('answer = 6 * 7\nprint("defined")')
    expect(defined).toMatchObject({ error: null, timedOut: false, kernelRestarted: false, truncated: null })
    expect(defined.logs.stdout.join('')).toBe('defined\n')

    const used = await sb.runCode('answer + 1')
    expect(used.text).toBe('43')
    expect(used.results).toHaveLength(1)
    expect(used.results[0].isMainResult).toBe(true)
    expect(used.executionCount).toBe((defined.executionCount ?? 0) + 1)

    // No plt.show(): the inline backend displays the figure when the cell ends.
    const plot = await sb.runCode(
      'import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [answer, 1, answer])\nplt.title("t")',
    )
    expect(plot.error).toBeNull()
    const figure = plot.results.find((r) => r.png !== undefined) as CodeResult
    expect(figure.isMainResult).toBe(false)
    expect(figure.png!.subarray(0, 8).equals(PNG_SIGNATURE)).toBe(true)
    expect(figure.png!.length).toBeGreaterThan(1000)
    expect(figure.formats).toContain('png')

    const frame = await sb.runCode('import pandas as pd\npd.DataFrame({"a": [1, 2], "b": ["x", "y"]})')
    expect(frame.results[0].html).toMatch(/<table[\s\S]*<td>x<\/td>/)
    expect(frame.results[0].text).toMatch(/a\s+b/)

    const raised = await sb.runCode('def f():\n    raise ValueError("bad " + str(answer))\nf()')
    expect(raised.error).toMatchObject({ name: 'ValueError', value: 'bad 42' })
    expect(raised.error!.traceback).toMatch(/in f\(\)[\s\S]*ValueError: bad 42/)
    // No colour codes in the traceback.
    expect(raised.error!.traceback).not.toContain('\u001b[')

    const slow = await sb.runCode('import time\nprint("sleeping", flush=True)\ntime.sleep(600)', { timeoutMs: 1_000 })
    expect(slow.timedOut).toBe(true)
    expect(slow.error?.name).toBe('KeyboardInterrupt')
    expect(slow.logs.stdout.join('')).toBe('sleeping\n')
    expect((await sb.runCode('answer')).text).toBe('42')

    const [context] = sb.codeContexts().filter((c) => c.isDefault && c.language === 'python')
    await sb.restartCodeContext(context)
    const gone = await sb.runCode('answer')
    expect(gone.error?.name).toBe('NameError')
    expect(gone.kernelRestarted).toBe(false)
  })
})

describe('streaming', () => {
  it('onStdout gets a chunk while the cell still runs (the cell waits for a file the listener writes)', async () => {
    const seen: string[] = []
    const execution = await sb.runCode(
      'import os, time\nprint("first", flush=True)\nwhile not os.path.exists("/tmp/go"):\n    time.sleep(0.01)\nprint("second")',
      {
        onStdout: (text) => {
          seen.push(text)
          if (text.includes('first')) void sb.fs.writeFile('/tmp/go', 'x', { mode: 0o666 })
        },
        timeoutMs: 30_000,
      },
    )
    expect(execution.timedOut).toBe(false)
    expect(seen.join('')).toBe('first\nsecond\n')
  })

  it('runCodeStream yields stdout, stderr, results and the error as they come, and ends with the execution', async () => {
    const events: CodeEvent[] = []
    for await (const event of sb.runCodeStream(
      'import sys\nprint("out")\nprint("err", file=sys.stderr)\ndisplay(1)\nraise KeyError("k")',
    ))
      events.push(event)
    expect(events.map((e) => e.type)).toEqual(['stdout', 'stderr', 'result', 'error', 'end'])
    const end = events.at(-1) as Extract<CodeEvent, { type: 'end' }>
    expect(end.execution.error?.name).toBe('KeyError')
    expect(end.execution.logs).toEqual({ stdout: ['out\n'], stderr: ['err\n'] })
  })

  it('onResult and onError are called; an exception a listener throws is dropped', async () => {
    const results: CodeResult[] = []
    const execution = await sb.runCode('display("shown")\n1/0', {
      onResult: (r) => {
        results.push(r)
        throw new Error('listener failed')
      },
      onError: () => {
        throw new Error('listener failed too')
      },
    })
    expect(results.map((r) => r.text)).toEqual(["'shown'"])
    expect(execution.error?.name).toBe('ZeroDivisionError')
  })
})

describe('contexts', () => {
  it('each context has its own state, cwd and env; list, remove, and a removed one is refused', async () => {
    const a = await sb.createCodeContext({ cwd: '/tmp', env: { WHO: 'a' } })
    const b = await sb.createCodeContext({ language: 'python', env: { WHO: 'b' } })
    expect(a.uid).not.toBe(b.uid)
    await sb.runCode('x = "in a"', { context: a })
    expect((await sb.runCode('import os; (os.getcwd(), os.environ["WHO"], x)', { context: a })).text).toBe(
      "('/tmp', 'a', 'in a')",
    )
    const inB = await sb.runCode('import os; os.environ["WHO"]; x', { context: b.id })
    expect(inB.error?.name).toBe('NameError')
    expect(sb.codeContexts().map((c) => c.id)).toEqual(expect.arrayContaining([a.id, b.id]))
    await sb.removeCodeContext(a)
    expect(sb.codeContexts().map((c) => c.id)).not.toContain(a.id)
    await expect(sb.runCode('1', { context: a })).rejects.toMatchObject({ code: 'S001' })
    await sb.removeCodeContext(b)
  })

  it("a file a cell writes is readable by the sandbox's commands and fs calls (the kernel's umask is 022)", async () => {
    await sb.runCode('open("/workspace/by-cell.txt", "w").write("from the cell")')
    expect(String(await sb.fs.readFile('/workspace/by-cell.txt'))).toBe('from the cell')
    expect((await sb.exec('cat', ['/workspace/by-cell.txt'])).stdout).toBe('from the cell')
  })

  it('cells on one context run one after the other, in order', async () => {
    const order: number[] = []
    await Promise.all(
      [0, 1, 2].map((i) => sb.runCode(`import time; time.sleep(${0.2 - i * 0.05})`).then(() => order.push(i))),
    )
    expect(order).toEqual([0, 1, 2])
  })
})

describe('interrupts and kernels that die', () => {
  it('an AbortSignal interrupts the cell and rejects with S206; the state survives', async () => {
    await sb.runCode('kept = "still here"')
    const controller = new AbortController()
    const running = sb.runCode('print("started", flush=True)\nimport time\ntime.sleep(600)', {
      signal: controller.signal,
      onStdout: () => controller.abort(),
    })
    await expect(running).rejects.toMatchObject({ code: 'S206' })
    expect((await sb.runCode('kept')).text).toBe("'still here'")
  })

  it('a kernel that exits is S227; the next cell runs on a new kernel and says so', async () => {
    await sb.runCode('lost = 1')
    const err = await sb.runCode('import os; os._exit(3)').catch((e: unknown) => e)
    expect(err).toMatchObject({ code: 'S227', retryable: true })
    expect((err as Error).message).toMatch(/python kernel of code context .* died \(exit code 3\)/)
    const next = await sb.runCode('lost')
    expect(next.kernelRestarted).toBe(true)
    expect(next.error?.name).toBe('NameError')
    expect((await sb.runCode('1')).kernelRestarted).toBe(false)
  })

  it('a cell that ignores the interrupt is ended after its grace (S227)', async () => {
    const err = await sb
      .runCode(
        'import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint("deaf", flush=True)\ntime.sleep(600)',
        { timeoutMs: 500 },
      )
      .catch((e: unknown) => e)
    expect(err).toMatchObject({ code: 'S227' })
    expect((err as Error).message).toMatch(/did not stop within \d+ ms of the interrupt of its timeout/)
    expect((await sb.runCode('2 + 2')).text).toBe('4')
  })
})

describe('bad input', () => {
  it.each([
    ['code that is not a string', () => sb.runCode(42 as never), 'S001', /code/],
    ['an unknown option', () => sb.runCode('1', { colour: true } as never), 'S001', /colour/],
    ['an unknown language', () => sb.runCode('1', { language: 'cobol' as never }), 'S001', /cobol/],
    ['timeoutMs of 0', () => sb.runCode('1', { timeoutMs: 0 }), 'S003', /timeoutMs/],
    ['maxOutputBytes too small', () => sb.runCode('1', { maxOutputBytes: 10 }), 'S003', /maxOutputBytes/],
    ['an unknown context', () => sb.runCode('1', { context: 'ctx-nope' }), 'S001', /ctx-nope/],
    ['a listener that is not a function', () => sb.runCode('1', { onStdout: 'x' as never }), 'S001', /onStdout/],
    ['a relative cwd', () => sb.createCodeContext({ cwd: 'rel' }), 'S001', /cwd/],
    [
      'a language of another context',
      () => sb.runCode('1', { context: sb.codeContexts()[0], language: 'javascript' }),
      'S001',
      /javascript/,
    ],
  ])('%s is refused', async (_name, call, code, named) => {
    const err = await Promise.resolve()
      .then(call as () => Promise<unknown>)
      .catch((e: unknown) => e)
    expect(err).toMatchObject({ code })
    expect((err as Error).message).toMatch(named)
  })

  it('an image without a kernel says which image has one (S224)', async () => {
    const plain = await rt.create({ image: 'base' })
    try {
      const err = await plain.runCode('1').catch((e: unknown) => e)
      expect(err).toMatchObject({ code: 'S224' })
      expect((err as Error).message).toMatch(/python kernel[\s\S]*code-interpreter image/)
    } finally {
      await plain.stop()
    }
  })
})
