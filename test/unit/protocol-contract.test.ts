/**
 * The contract (protocol/v1.json) and what is generated from it: the committed generated files
 * are fresh, a hand edit to one is caught, a change to the contract reaches both sides, and the
 * parts neither generator writes (the agent's handler registrations, the host's op calls, the
 * krun shim's C defines) still agree with it. Statuses and the wire shapes the public API shows
 * (FileEntry, GrepMatch, SedFileResult, CommandUsage) are the generated ones, not copies.
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { AGENT_VSOCK_PORT } from '../../lib/drivers/krun.js'
import { MESSAGES, OPS } from '../../lib/protocol/contract.gen.js'
import { generate, readDocs, staleFiles } from '../../scripts/gen-protocol.mjs'

const ROOT = path.resolve(import.meta.dirname, '../..')
const GENERATED = [
  'lib/protocol/contract.gen.ts',
  'lib/protocol/errors.gen.ts',
  'agent/protocol/contract_gen.go',
  'agent/protocol/wire_gen.go',
  'agent/config/config_gen.go',
  'PROTOCOL.md',
  'ERRORS.md',
]
/** The generated files that are wholly generated (the docs only have generated tables). */
const WHOLLY_GENERATED = GENERATED.filter((rel) => !rel.endsWith('.md'))
const contract = JSON.parse(fs.readFileSync(path.join(ROOT, 'protocol/v1.json'), 'utf8'))

const tmpDirs: string[] = []
afterAll(() => {
  for (const d of tmpDirs) fs.rmSync(d, { recursive: true, force: true })
})

/** A scratch copy of the contract, the generator and the generated files. */
function scratchCopy(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-contract-'))
  tmpDirs.push(dir)
  for (const rel of ['protocol/v1.json', 'scripts/gen-protocol.mjs', ...GENERATED]) {
    fs.mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true })
    fs.copyFileSync(path.join(ROOT, rel), path.join(dir, rel))
  }
  return dir
}

describe('protocol contract', () => {
  it('generates exactly the committed files (run `npm run gen:protocol` after editing protocol/v1.json)', () => {
    // The generator run as the build runs it, into a scratch copy, then compared byte for byte.
    const dir = scratchCopy()
    for (const rel of WHOLLY_GENERATED) fs.rmSync(path.join(dir, rel))
    execFileSync(process.execPath, [path.join(dir, 'scripts/gen-protocol.mjs')])
    for (const rel of GENERATED)
      expect(fs.readFileSync(path.join(dir, rel), 'utf8'), rel).toBe(fs.readFileSync(path.join(ROOT, rel), 'utf8'))
    expect(staleFiles(ROOT)).toEqual([])
  })

  it('detects a hand-edited generated file', () => {
    const dir = scratchCopy()
    expect(staleFiles(dir)).toEqual([])
    const ts = path.join(dir, 'lib/protocol/contract.gen.ts')
    fs.writeFileSync(ts, fs.readFileSync(ts, 'utf8').replace('MAX_PAYLOAD = 4194304', 'MAX_PAYLOAD = 8388608'))
    const errors = path.join(dir, 'ERRORS.md')
    fs.writeFileSync(
      errors,
      fs.readFileSync(errors, 'utf8').replace('`S211` | filesystem | no |', '`S211` | filesystem | yes |'),
    )
    const wire = path.join(dir, 'agent/protocol/wire_gen.go')
    fs.writeFileSync(wire, fs.readFileSync(wire, 'utf8').replace('`json:"exitCode"`', '`json:"exit_code"`'))
    expect(staleFiles(dir)).toEqual(['lib/protocol/contract.gen.ts', 'agent/protocol/wire_gen.go', 'ERRORS.md'])
    // The CLI check the build can run fails the same way.
    expect(() =>
      execFileSync(process.execPath, [path.join(dir, 'scripts/gen-protocol.mjs'), '--check'], { stdio: 'pipe' }),
    ).toThrow(/stale generated files/)
  })

  it('carries a renamed field into both the TypeScript and the Go output', () => {
    const before = generate(contract, readDocs(ROOT))
    const renamed = structuredClone(contract)
    const req = renamed.ops['exec.start'].request
    renamed.ops['exec.start'].request = Object.fromEntries(
      Object.entries(req).map(([k, v]) => [k === 'cwd' ? 'workdir' : k, v]),
    )
    const after = generate(renamed, readDocs(ROOT))
    for (const rel of ['lib/protocol/contract.gen.ts', 'agent/protocol/contract_gen.go', 'PROTOCOL.md'])
      expect(after[rel], rel).not.toBe(before[rel])
    expect(before['lib/protocol/contract.gen.ts']).toContain('cwd?: string')
    expect(after['lib/protocol/contract.gen.ts']).toContain('workdir?: string')
    expect(after['lib/protocol/contract.gen.ts']).not.toMatch(/ExecStartRequest \{[^}]*cwd\?/)
    expect(before['agent/protocol/contract_gen.go']).toContain('{Name: "cwd", Kinds: KindString}')
    expect(after['agent/protocol/contract_gen.go']).toContain('{Name: "workdir", Kinds: KindString}')
    expect(after['agent/protocol/contract_gen.go']).not.toContain('"cwd"')
  })

  it(
    "carries a renamed response field into the agent's structs, and the agent no longer builds until its code follows",
    { timeout: 120_000 },
    () => {
      const renamed = structuredClone(contract)
      const entry = renamed.shapes.fsEntry
      renamed.shapes.fsEntry = Object.fromEntries(
        Object.entries(entry).map(([k, v]) => [k === 'mtime' ? 'modifiedAt' : k, v]),
      )
      const after = generate(renamed, readDocs(ROOT))
      expect(after['agent/protocol/wire_gen.go']).toMatch(/ModifiedAt +int64 +`json:"modifiedAt"`/)
      expect(after['agent/protocol/wire_gen.go']).not.toContain('`json:"mtime"`\n}\n\n// GrepMatch')
      expect(after['lib/protocol/contract.gen.ts']).toMatch(/FsEntryWire \{[^}]*modifiedAt: number/)
      expect(after['PROTOCOL.md']).toContain('modifiedAt: int')
      // The agent's fs ops fill the generated struct: with the field renamed they stop compiling.
      const agent = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-agent-'))
      tmpDirs.push(agent)
      fs.cpSync(path.join(ROOT, 'agent'), agent, { recursive: true, filter: (src) => !src.includes(`${path.sep}dist`) })
      fs.writeFileSync(path.join(agent, 'protocol/wire_gen.go'), after['agent/protocol/wire_gen.go'])
      const build = () =>
        execFileSync('go', ['build', '-o', os.devNull, './...'], {
          cwd: agent,
          stdio: 'pipe',
          env: { ...process.env, CGO_ENABLED: '0' },
        })
      expect(build).toThrow(/unknown field '?Mtime/)
    },
  )

  it('builds each templated error message alike on both sides, naming the offending values', () => {
    const templated = contract.errors.filter((e: { message?: string }) => e.message !== undefined)
    expect(templated.length).toBeGreaterThan(5)
    const go = generate(contract, readDocs(ROOT))['agent/protocol/wire_gen.go']
    for (const e of templated as { name: string; code: string; message: string }[]) {
      const names = [...e.message.matchAll(/\{(\w+)(?::q)?\}/g)].map((m) => m[1])
      const values = Object.fromEntries(names.map((n, i) => [n, `v${i}-of-${e.code}`]))
      const text = (MESSAGES as unknown as Record<string, (v: Record<string, unknown>) => string>)[e.name](values)
      for (const v of Object.values(values)) expect(text, e.code).toContain(v)
      // The Go side formats the same template: the literal text between placeholders is identical.
      const goPascal = e.name[0].toUpperCase() + e.name.slice(1)
      expect(go, e.code).toContain(`func ${goPascal}Error(`)
      for (const piece of e.message.split(/\{\w+(?::q)?\}/).filter((p) => p.length > 0))
        expect(go, e.code).toContain(piece)
    }
    // The host's own messages are built from the same templates.
    expect(MESSAGES.outOfRange({ field: 'cpus', allowed: 'between 1 and 8', value: 99 })).toBe(
      'cpus must be between 1 and 8, got 99',
    )
  })

  it("gives every registry code a template whose placeholders are exactly its generated helpers' parameters", () => {
    const go = generate(contract, readDocs(ROOT))['agent/protocol/wire_gen.go']
    const helpers = MESSAGES as unknown as Record<string, (v: Record<string, unknown>) => string>
    expect(Object.keys(helpers).sort()).toEqual(contract.errors.map((e: { name: string }) => e.name).sort())
    for (const e of contract.errors as { name: string; code: string; message?: string }[]) {
      expect(typeof e.message, `${e.code} has no message template`).toBe('string')
      const names = [...new Set([...e.message!.matchAll(/\{(\w+)(?::q)?\}/g)].map((m) => m[1]))]
      expect(names.length, e.code).toBeGreaterThan(0)
      // TypeScript: a value for each placeholder shows in the text, and none is left unfilled.
      const text = helpers[e.name](Object.fromEntries(names.map((n) => [n, `<${n}>`])))
      for (const n of names) expect(text, e.code).toContain(`<${n}>`)
      expect(text, e.code).not.toMatch(/\{\w+(:q)?\}|undefined/)
      // Go: the constructor takes one parameter per placeholder, and no other.
      const goPascal = e.name[0].toUpperCase() + e.name.slice(1)
      const params = go.match(new RegExp(`func ${goPascal}Error\\(([^)]*) any\\)`))?.[1].split(', ')
      expect(params, e.code).toEqual(names)
    }
    const untemplated = structuredClone(contract)
    delete untemplated.errors[3].message
    expect(() => generate(untemplated, readDocs(ROOT))).toThrow(/S004: no message template/)
  })

  it('refuses a contract with a typo instead of generating nonsense', () => {
    const broken = structuredClone(contract)
    broken.ops['fs.stat'].response.size.type = 'integer'
    expect(() => generate(broken, readDocs(ROOT))).toThrow(/unknown type integer/)
    const stray = structuredClone(contract)
    stray.errors[0].message = 'value {bad'
    expect(() => generate(stray, readDocs(ROOT))).toThrow(/stray brace|no \{placeholder\}/)
  })

  it('writes Go that gofmt leaves alone', () => {
    const goFiles = WHOLLY_GENERATED.filter((rel) => rel.endsWith('.go')).map((rel) => path.join(ROOT, rel))
    const out = execFileSync('gofmt', ['-l', ...goFiles], { encoding: 'utf8' })
    expect(out).toBe('')
  })

  it('names every op the agent registers and every op the host sends, and no other', () => {
    // agent/ops.go: the one table of handlers (agent.opTable), a protocol.OpHandlers whose fields
    // the compiler holds to the contract; this checks that none is left unset.
    const table = fs.readFileSync(path.join(ROOT, 'agent', 'ops.go'), 'utf8')
    const registered = new Set([...table.matchAll(/^\t+(\w+):\s+[\w.]+,$/gm)].map((m) => m[1]))
    const goName = (op: string) =>
      op
        .split(/[.]/)
        .map((w) => w[0].toUpperCase() + w.slice(1))
        .join('')
    expect([...registered].sort()).toEqual(Object.keys(OPS).map(goName).sort())

    const sent = new Set<string>()
    const walk = (dir: string): string[] =>
      fs
        .readdirSync(dir, { withFileTypes: true })
        .flatMap((e) =>
          e.isDirectory() ? walk(path.join(dir, e.name)) : e.name.endsWith('.ts') ? [path.join(dir, e.name)] : [],
        )
    for (const file of walk(path.join(ROOT, 'lib'))) {
      for (const m of fs.readFileSync(file, 'utf8').matchAll(/\.(?:call|request)\(\s*'([a-z]+\.[a-zA-Z]+)'/g))
        sent.add(m[1])
    }
    expect(sent.size).toBeGreaterThan(10)
    for (const op of sent) expect(Object.keys(OPS), op).toContain(op)
  })

  it('agrees with the hand-kept copies it cannot generate: the krun shim, the vsock port', () => {
    expect(AGENT_VSOCK_PORT).toBe(contract.krunShim.agentVsockPort)
    const header = (name: string) => fs.readFileSync(path.join(ROOT, 'native/src/shim', name), 'utf8')
    const define = (text: string, name: string) => text.match(new RegExp(`#define ${name} (\\S+)`))?.[1]
    const fd = (name: string) => contract.krunShim.fds.find((f: { name: string }) => f.name === name).fd
    const tag = (name: string) => `"${contract.krunShim.tags.find((t: { name: string }) => t.name === name).tag}"`
    expect(Number(define(header('shim_report.h'), 'SHIM_BOOT_ERROR_FD'))).toBe(fd('bootError'))
    expect(Number(define(fs.readFileSync(path.join(ROOT, 'native/src/shim/krun_shim.c'), 'utf8'), 'CONFIG_FD'))).toBe(
      fd('config'),
    )
    expect(define(header('shim_config.h'), 'SHIM_IMAGE_TAG')).toBe(tag('image'))
    expect(define(header('shim_config.h'), 'SHIM_CTL_TAG')).toBe(tag('ctl'))
    expect(define(header('shim_config.h'), 'SHIM_BOOT_TAG')).toBe(tag('boot'))
  })
})
