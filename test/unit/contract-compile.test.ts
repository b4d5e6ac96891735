/**
 * Both sides compile against the contract: a copy of the repository's contract, generator, lib/
 * and agent/ builds as it is (tsc --noEmit, go build ./...), and after one request field
 * (fs.mv's overwrite) and one boot-config field (pidsMax) are renamed in its v1.json and the
 * generator is run, neither compiles, each failing where the old names are still used: the
 * host's call and boot spec, the agent's handler and config check.
 */
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { afterAll, describe, expect, it } from 'vitest'
import { writeGenerated } from '../../scripts/gen-protocol.mjs'

const run = promisify(execFile)
const ROOT = path.resolve(import.meta.dirname, '../..')
const TSC = path.join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc')
const dirs: string[] = []
afterAll(() => {
  for (const d of dirs) fs.rmSync(d, { recursive: true, force: true })
})

/** A copy of what the generator reads and writes and of both codebases, with a tsconfig for lib/ alone. */
function copyTree(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-contract-compile-'))
  dirs.push(dir)
  for (const rel of ['package.json', 'protocol', 'scripts/gen-protocol.mjs', 'PROTOCOL.md', 'ERRORS.md', 'lib'])
    fs.cpSync(path.join(ROOT, rel), path.join(dir, rel), { recursive: true })
  fs.cpSync(path.join(ROOT, 'agent'), path.join(dir, 'agent'), {
    recursive: true,
    filter: (src) => path.basename(src) !== 'dist',
  })
  fs.symlinkSync(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'))
  const tsconfig = JSON.parse(fs.readFileSync(path.join(ROOT, 'tsconfig.json'), 'utf8'))
  fs.writeFileSync(
    path.join(dir, 'tsconfig.json'),
    JSON.stringify({
      ...tsconfig,
      compilerOptions: { ...tsconfig.compilerOptions, declaration: false },
      include: ['lib/**/*.ts'],
    }),
  )
  return dir
}

/** Renames a key of an object in place, keeping its place among the others. */
function renameKey(fields: Record<string, unknown>, from: string, to: string): void {
  const entries = Object.entries(fields)
  for (const [k] of entries) delete fields[k]
  for (const [k, v] of entries) fields[k === from ? to : k] = v
}

/** Both compilers over one tree: what each says, and whether it passed. */
async function compile(dir: string): Promise<{ ts: { ok: boolean; out: string }; go: { ok: boolean; out: string } }> {
  const outcome = (p: Promise<{ stdout: string; stderr: string }>) =>
    p.then(
      (r) => ({ ok: true, out: r.stdout + r.stderr }),
      (e: { stdout?: string; stderr?: string }) => ({ ok: false, out: `${e.stdout ?? ''}${e.stderr ?? ''}` }),
    )
  const [ts, go] = await Promise.all([
    outcome(run(process.execPath, [TSC, '--noEmit', '-p', dir], { maxBuffer: 16 << 20 })),
    outcome(
      run('go', ['build', '-o', os.devNull, './...'], {
        cwd: path.join(dir, 'agent'),
        env: { ...process.env, CGO_ENABLED: '0' },
        maxBuffer: 16 << 20,
      }),
    ),
  ])
  return { ts, go }
}

describe('the contract compiles into both sides', () => {
  it(
    'a renamed request field and a renamed boot-config field fail tsc and go build, which pass before',
    { timeout: 90_000 },
    async () => {
      const before = copyTree()
      const after = copyTree()
      // The copies are generated as the repository is: nothing changes before the rename.
      expect(writeGenerated(before)).toEqual([])
      const contractFile = path.join(after, 'protocol/v1.json')
      const contract = JSON.parse(fs.readFileSync(contractFile, 'utf8'))
      renameKey(contract.ops['fs.mv'].request, 'overwrite', 'replaceExisting')
      renameKey(contract.bootConfig.fields, 'pidsMax', 'maxProcesses')
      fs.writeFileSync(contractFile, JSON.stringify(contract, null, 2))
      expect(writeGenerated(after)).toEqual(
        expect.arrayContaining([
          'lib/protocol/contract.gen.ts',
          'agent/protocol/contract_gen.go',
          'agent/config/config_gen.go',
        ]),
      )

      const [ok, renamed] = await Promise.all([compile(before), compile(after)])
      expect(ok.ts, ok.ts.out).toMatchObject({ ok: true })
      expect(ok.go, ok.go.out).toMatchObject({ ok: true })

      // The host: the call still sends overwrite, the boot spec still sets pidsMax.
      expect(renamed.ts.ok).toBe(false)
      expect(renamed.ts.out).toMatch(/lib\/fs\.ts\(\d+,\d+\): error TS\d+: [^\n]*'overwrite'/)
      expect(renamed.ts.out).toMatch(/lib\/create-pipeline\.ts\(\d+,\d+\): error TS\d+: [^\n]*(pidsMax|maxProcesses)/)
      // The agent: fs.mv's handler still reads r.Overwrite, the config check c.PidsMax.
      expect(renamed.go.ok).toBe(false)
      expect(renamed.go.out).toMatch(/fsops\/mv\.go:\d+:\d+: r\.Overwrite undefined/)
      expect(renamed.go.out).toMatch(/config\/config\.go:\d+:\d+: c\.PidsMax undefined/)
    },
  )
})
