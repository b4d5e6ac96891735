/**
 * sb.runCode in JavaScript and TypeScript (issue 42) on the code-interpreter preset, whose tslab
 * comes from the npm registry at build time: the AI-agent loop of the issue (a variable kept
 * between cells, top-level await, a cell that throws, a cell past its timeout and the state
 * after it, a restart) and a TypeScript cell. The sandbox has no network: the kernel needs none.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
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

const js = { language: 'javascript' } as const

describe('the agent loop in JavaScript', () => {
  it('keeps state, awaits at top level, throws, survives a timeout, and forgets everything on restart', async () => {
    const defined = await sb.runCode('let answer = 6 * 7\nconsole.log("defined")', js)
    expect(defined).toMatchObject({ error: null, timedOut: false, kernelRestarted: false, truncated: null })
    expect(defined.logs.stdout.join('')).toBe('defined\n')

    const used = await sb.runCode('console.log(answer + 1)', js)
    expect(used.error).toBeNull()
    expect(used.logs.stdout.join('')).toBe('43\n')

    const awaited = await sb.runCode(
      'const later = await new Promise((resolve) => setTimeout(() => resolve(answer * 2), 10))\nconsole.log(later)',
      js,
    )
    expect(awaited.error).toBeNull()
    expect(awaited.logs.stdout.join('')).toBe('84\n')

    const thrown = await sb.runCode('function f() { throw new RangeError("bad " + answer) }\nf()', js)
    expect(thrown.error).toMatchObject({ name: 'RangeError', value: 'bad 42' })
    expect(thrown.error!.traceback).toMatch(/RangeError: bad 42[\s\S]*at f/)

    const slow = await sb.runCode('console.log("spinning")\nfor (;;) {}', { ...js, timeoutMs: 1_000 })
    expect(slow.timedOut).toBe(true)
    expect(slow.error?.value).toMatch(/interrupted by `SIGINT`/)
    expect(slow.logs.stdout.join('')).toBe('spinning\n')
    expect((await sb.runCode('console.log(answer)', js)).logs.stdout.join('')).toBe('42\n')

    const [context] = sb.codeContexts().filter((c) => c.isDefault && c.language === 'javascript')
    await sb.restartCodeContext(context)
    const gone = await sb.runCode('console.log(answer)', js)
    // tslab checks names before it runs a cell: a forgotten one fails to compile.
    expect(gone.error?.traceback).toMatch(/Cannot find name 'answer'/)
    expect(gone.kernelRestarted).toBe(false)
  })
})

describe('TypeScript', () => {
  it('runs a typed cell and reports a type error as an error', async () => {
    const ts = { language: 'typescript' } as const
    const typed = await sb.runCode(
      'interface Point { x: number; y: number }\nconst p: Point = { x: 3, y: 4 }\nconsole.log(Math.hypot(p.x, p.y))',
      ts,
    )
    expect(typed.error).toBeNull()
    expect(typed.logs.stdout.join('')).toBe('5\n')
    const mistyped = await sb.runCode('const n: number = "four"', ts)
    expect(mistyped.error).not.toBeNull()
    expect(JSON.stringify(mistyped.error)).toMatch(/not assignable to type 'number'/)
  })
})
