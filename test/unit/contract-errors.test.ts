/**
 * Error construction from the contract: errors.<name>(params, options) (lib/protocol/errors.gen.ts)
 * is the SandboxError of that name's code with its template's message, and the one-shot codemod
 * (scripts/codemods/errors.mjs) rewrites `new SandboxError('Sxxx', MESSAGES.name(…), opts)` into
 * it: exactly where the code is the template's own, and a copy of lib/ it rewrote still compiles.
 */
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { afterAll, describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import { MESSAGES } from '../../lib/protocol/contract.gen.js'
import { errors } from '../../lib/protocol/errors.gen.js'
import { codemod, rewrite } from '../../scripts/codemods/errors.mjs'

const ROOT = path.resolve(import.meta.dirname, '../..')
const contract = JSON.parse(fs.readFileSync(path.join(ROOT, 'protocol/v1.json'), 'utf8'))
const codeOf = new Map<string, string>(contract.errors.map((e: { name: string; code: string }) => [e.name, e.code]))
const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true })
})

describe('errors.<name>', () => {
  it('builds the SandboxError of its code from the contract template, options included', () => {
    const cause = new Error('disk gone')
    const err = errors.fsNotFound({ path: '/w/x', reason: 'no such file' }, { cause, retryable: true, details: { errno: 'ENOENT' } })
    const long = new SandboxError('S211', MESSAGES.fsNotFound({ path: '/w/x', reason: 'no such file' }), { cause, retryable: true, details: { errno: 'ENOENT' } })
    expect(err).toBeInstanceOf(SandboxError)
    expect(err.toJSON()).toEqual(long.toJSON())
    expect([err.code, err.message, err.cause, err.details]).toEqual([long.code, long.message, long.cause, long.details])
    // Its stack starts where it was made, not inside the generated constructor.
    expect(err.stack?.split('\n')[1]).toContain('contract-errors.test.ts')
    // One constructor per registered code, each giving that code.
    expect(Object.keys(errors).sort()).toEqual([...codeOf.keys()].sort())
    for (const [name, code] of codeOf) expect((errors as unknown as Record<string, (v: object) => SandboxError>)[name]({}).code, name).toBe(code)
  })
})

describe('the errors codemod', () => {
  it('rewrites a construction whose code is its template\'s, keeps options and nested parentheses, and leaves the rest', () => {
    const src = [
      "throw new SandboxError('S001', MESSAGES.badArgument({ subject: `a (${f(x)})`, problem: 'is ) odd' }))",
      "const e = new SandboxError(\n  'S211',\n  MESSAGES.fsNotFound({ path: p.replace(/[()]/g, ''), reason }),\n  { cause: err },\n)",
      "new SandboxError(code, MESSAGES.badArgument({ subject, problem }))",
      "new SandboxError('S005', MESSAGES.connectionLost({ subject, problem }))",
    ].join('\n')
    const { text, rewritten, skipped } = rewrite(src, codeOf)
    expect(rewritten).toBe(2)
    expect(text).toContain("throw errors.badArgument({ subject: `a (${f(x)})`, problem: 'is ) odd' })")
    expect(text).toContain("const e = errors.fsNotFound({ path: p.replace(/[()]/g, ''), reason }, { cause: err })")
    expect(text).toContain('new SandboxError(code, MESSAGES.badArgument({ subject, problem }))')
    expect(skipped).toEqual(['S005 with MESSAGES.connectionLost (S205)'])
  })

  it('converts a copy of lib/ that still compiles', { timeout: 90_000 }, async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-errors-codemod-'))
    dirs.push(dir)
    for (const rel of ['package.json', 'lib']) fs.cpSync(path.join(ROOT, rel), path.join(dir, rel), { recursive: true })
    fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'))
    const tsconfig = JSON.parse(fs.readFileSync(path.join(ROOT, 'tsconfig.json'), 'utf8'))
    fs.writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({ ...tsconfig, compilerOptions: { ...tsconfig.compilerOptions, declaration: false }, include: ['lib/**/*.ts'] }))
    const summary = codemod(path.join(dir, 'lib'))
    expect(summary.rewritten).toBeGreaterThan(100)
    const left = (rel: string): string[] =>
      fs.readdirSync(path.join(dir, rel), { withFileTypes: true }).flatMap((e) => {
        const p = path.join(rel, e.name)
        if (e.isDirectory()) return left(p)
        if (!e.name.endsWith('.ts') || e.name.endsWith('.gen.ts')) return []
        return [...fs.readFileSync(path.join(dir, p), 'utf8').matchAll(/new SandboxError\(\s*'(S\d{3})',\s*MESSAGES\.(\w+)\(/g)].filter((m) => codeOf.get(m[2]) === m[1]).map(() => p)
      })
    expect(left('lib')).toEqual([])
    const tsc = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc')
    await expect(promisify(execFile)(process.execPath, [tsc, '--noEmit', '-p', dir], { maxBuffer: 16 << 20 }).then(() => 'clean', (e) => e.stdout)).resolves.toBe('clean')
  })
})
