import fs from 'node:fs'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { ERROR_CODES, SandboxError, isSandboxError } from '../../lib/errors.js'

describe('SandboxError', () => {
  it('carries code, type, retryable, details and cause', () => {
    const cause = new Error('root')
    const e = new SandboxError('S218', 'upload to /a aborted', { cause, details: { path: '/a' } })
    expect(e).toBeInstanceOf(Error)
    expect(e.name).toBe('SandboxError')
    expect(e.code).toBe('S218')
    expect(e.type).toBe('filesystem')
    expect(e.retryable).toBe(true)
    expect(e.message).toContain('/a')
    expect(e.cause).toBe(cause)
    expect(isSandboxError(e, 'S218')).toBe(true)
    expect(isSandboxError(e, 'S211')).toBe(false)
  })

  it("takes a per-error retry advice over its code's default, in the envelope too", () => {
    expect(new SandboxError('S102', 'pull refused', { retryable: false })).toMatchObject({
      code: 'S102',
      retryable: false,
    })
    expect(JSON.parse(JSON.stringify(new SandboxError('S102', 'pull refused', { retryable: false }))).retryable).toBe(
      false,
    )
    expect(new SandboxError('S102', 'registry unreachable').retryable).toBe(ERROR_CODES.S102.retryable)
    expect(new SandboxError('S001', 'odd but allowed', { retryable: true }).retryable).toBe(true)
    expect(SandboxError.fromCode('S102', 'x', { retryable: false }).retryable).toBe(false)
  })

  it('turns unknown codes from a boundary into S500 without losing them', () => {
    const e = SandboxError.fromCode('S999', 'weird')
    expect(e.code).toBe('S500')
    expect(e.message).toContain('S999')
    expect(SandboxError.fromCode({ evil: true }, 'x').code).toBe('S500')
  })

  it('is recognised across copies of the class (instanceof by brand)', () => {
    const foreign = Object.assign(Object.create(Error.prototype), { [Symbol.for('krunbox.error')]: true })
    expect(foreign instanceof SandboxError).toBe(true)
    expect(new Error('x') instanceof SandboxError).toBe(false)
  })

  it('has every registered code documented in ERRORS.md', () => {
    // The table itself is generated from protocol/v1.json (test/unit/protocol-contract.test.ts checks it is fresh).
    const doc = fs.readFileSync(new URL('../../ERRORS.md', import.meta.url), 'utf8')
    for (const code of Object.keys(ERROR_CODES)) expect(doc).toContain(`\`${code}\``)
  })

  it('carries the five-field envelope: "type, code, message, docs_url, retryable" (docs_url: the code\'s anchor in the shipped ERRORS.md)', () => {
    const e = new SandboxError('S102', "image 'python' could not be built")
    const envelope = JSON.parse(JSON.stringify(e))
    expect(Object.keys(envelope).sort()).toEqual(['code', 'docs_url', 'message', 'retryable', 'type'])
    expect(envelope).toMatchObject({
      type: 'config',
      code: 'S102',
      message: "image 'python' could not be built",
      retryable: true,
    })
    expect(envelope.docs_url).toBe(e.docsUrl)
    const url = new URL(e.docsUrl)
    expect(url.protocol).toBe('file:')
    expect(url.hash).toBe('#S102')
    // The URL names the file the package ships, and that file has the anchor.
    const doc = fs.readFileSync(fileURLToPath(url), 'utf8')
    expect(doc).toContain('<a id="S102"></a>`S102`')
    for (const code of Object.keys(ERROR_CODES)) expect(doc).toContain(`<a id="${code}"></a>`)
    expect(SandboxError.fromCode('S999', 'x').docsUrl.endsWith('#S500')).toBe(true)
  })
})
