/**
 * Error construction from the contract: errors.<name>(params, options) (lib/protocol/errors.gen.ts)
 * is the SandboxError of that name's code with its template's message, and lib/ builds its
 * errors that way instead of spelling a code beside the template that already implies it.
 */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import { MESSAGES } from '../../lib/protocol/contract.gen.js'
import { errors } from '../../lib/protocol/errors.gen.js'

const ROOT = path.resolve(import.meta.dirname, '../..')
const contract = JSON.parse(fs.readFileSync(path.join(ROOT, 'protocol/v1.json'), 'utf8'))
const codeOf = new Map<string, string>(contract.errors.map((e: { name: string; code: string }) => [e.name, e.code]))

describe('errors.<name>', () => {
  it('builds the SandboxError of its code from the contract template, options included', () => {
    const cause = new Error('disk gone')
    const err = errors.fsNotFound(
      { path: '/w/x', reason: 'no such file' },
      { cause, retryable: true, details: { errno: 'ENOENT' } },
    )
    const long = new SandboxError('S211', MESSAGES.fsNotFound({ path: '/w/x', reason: 'no such file' }), {
      cause,
      retryable: true,
      details: { errno: 'ENOENT' },
    })
    expect(err).toBeInstanceOf(SandboxError)
    expect(err.toJSON()).toEqual(long.toJSON())
    expect([err.code, err.message, err.cause, err.details]).toEqual([long.code, long.message, long.cause, long.details])
    // Its stack starts where it was made, not inside the generated constructor.
    expect(err.stack?.split('\n')[1]).toContain('contract-errors.test.ts')
    // One constructor per registered code, each giving that code.
    expect(Object.keys(errors).sort()).toEqual([...codeOf.keys()].sort())
    for (const [name, code] of codeOf)
      expect((errors as unknown as Record<string, (v: object) => SandboxError>)[name]({}).code, name).toBe(code)
  })
})

/** lib/'s TypeScript files, the generated ones left out. */
function libFiles(dir = path.join(ROOT, 'lib')): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name)
    return e.isDirectory() ? libFiles(p) : e.name.endsWith('.ts') && !e.name.endsWith('.gen.ts') ? [p] : []
  })
}

/** Calls that pass a code literal and a MESSAGES template together (`f('S001', MESSAGES.badArgument(…))`), callee named. */
function codeBesideTemplate(text: string): { callee: string; code: string; name: string }[] {
  return [...text.matchAll(/([\w.]+)\(\s*'(S\d{3})',\s*MESSAGES\.(\w+)\(/g)].map(([, callee, code, name]) => ({
    callee,
    code,
    name,
  }))
}

describe('lib/ builds its errors as errors.<name>()', () => {
  it('no call site spells a code beside the template of that code, through SandboxError or a helper', () => {
    const found = libFiles().flatMap((file) =>
      codeBesideTemplate(fs.readFileSync(file, 'utf8'))
        // FrameError is the codec's own (S203/S204 only), turned into a SandboxError where it is caught.
        .filter((c) => c.callee !== 'FrameError')
        .map((c) => `${path.relative(ROOT, file)}: ${c.callee}('${c.code}', MESSAGES.${c.name}(…))`),
    )
    expect(found).toEqual([])
  })

  it('the scan above sees the spellings it refuses', () => {
    expect(codeBesideTemplate("throw new SandboxError('S001', MESSAGES.badArgument({ subject, problem }))")).toEqual([
      { callee: 'SandboxError', code: 'S001', name: 'badArgument' },
    ])
    expect(codeBesideTemplate("fail(\n  'S003',\n  MESSAGES.outOfRange({ field, allowed, value }),\n)")).toEqual([
      { callee: 'fail', code: 'S003', name: 'outOfRange' },
    ])
    expect(codeBesideTemplate('throw errors.badArgument({ subject, problem })')).toEqual([])
  })
})
