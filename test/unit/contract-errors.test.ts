/**
 * Error construction from the contract: errors.<name>(params, options) (lib/protocol/errors.gen.ts)
 * is the SandboxError of that name's code with its template's message.
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
