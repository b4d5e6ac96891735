/**
 * Drivers own what they know: a new driver is a file in lib/drivers/, its name in names.ts and
 * its entry in registry.ts, and the rest of lib/ compiles with it unchanged. The compiler also
 * refuses a name without a driver and a driver that leaves a capability unsaid. Outside
 * lib/drivers/ no module spells a driver's name (the generated messages aside).
 */
import fs from 'node:fs'
import path from 'node:path'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'
import { DRIVER_NAMES } from '../../lib/drivers/names.js'

const repoRoot = path.resolve(import.meta.dirname, '..', '..')
const libRoot = path.join(repoRoot, 'lib')
const driversDir = path.join(libRoot, 'drivers')

function tsFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name)
    return e.isDirectory() ? tsFiles(p) : e.name.endsWith('.ts') ? [p] : []
  })
}

const STUB = (capabilities: string) => `
import type { BootedSandbox, BootSpec, Driver, DriverCapabilities } from './types.js'

/** A driver that would boot sandboxes on another machine: only its shape, for the compiler. */
export class RemoteDriver implements Driver {
  readonly name = 'remote' as const
  readonly capabilities: DriverCapabilities = { ${capabilities} }

  async boot(spec: BootSpec): Promise<BootedSandbox> {
    throw new Error(\`not built: \${spec.id}\`)
  }
}
`
const ALL_CAPABILITIES =
  "agentMode: 'vm', fork: false, networkPolicy: { enforced: false, why: 'the far side routes', fix: 'use network: false' }, hostIdsFromSubordinates: false, processExecutable: 'remote-tunnel', resetForReuse: false"

/** lib/drivers/ with a third driver: names.ts and registry.ts edited, remote.ts added. */
function withRemoteDriver(options: { registered: boolean; capabilities: string }): Map<string, string> {
  const names = fs.readFileSync(path.join(driversDir, 'names.ts'), 'utf8')
  const registry = fs.readFileSync(path.join(driversDir, 'registry.ts'), 'utf8')
  const namesEdited = names.replace("['namespace', 'krun'] as const", "['namespace', 'krun', 'remote'] as const")
  let registryEdited = registry.replace(
    "import { NamespaceDriver } from './namespace.js'",
    "import { NamespaceDriver } from './namespace.js'\nimport { RemoteDriver } from './remote.js'",
  )
  if (options.registered)
    registryEdited = registryEdited.replace(
      '  krun: new KrunDriver(),\n',
      '  krun: new KrunDriver(),\n  remote: new RemoteDriver(),\n',
    )
  expect(namesEdited).not.toBe(names)
  expect(registryEdited).not.toBe(registry)
  return new Map([
    [path.join(driversDir, 'names.ts'), namesEdited],
    [path.join(driversDir, 'registry.ts'), registryEdited],
    [path.join(driversDir, 'remote.ts'), STUB(options.capabilities)],
  ])
}

const parsedFiles = new Map<string, ts.SourceFile | undefined>()

/** Type errors of lib/ (every module, as `tsc` sees it, or only those of `only`) with some files replaced or added. */
function typeErrors(
  overlay: Map<string, string>,
  oldProgram?: ts.Program,
  only?: string[],
): { errors: string[]; program: ts.Program } {
  for (const file of overlay.keys()) expect(path.dirname(file)).toBe(driversDir)
  const config = ts.getParsedCommandLineOfConfigFile(
    path.join(repoRoot, 'tsconfig.json'),
    {},
    { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} },
  )!
  const host = ts.createCompilerHost(config.options)
  // Unchanged files are parsed once for all three programs.
  const getSourceFile = host.getSourceFile.bind(host)
  host.getSourceFile = (file, language) => {
    if (overlay.has(path.resolve(file))) return getSourceFile(file, language)
    let parsed = parsedFiles.get(file)
    if (!parsed) parsedFiles.set(file, (parsed = getSourceFile(file, language)))
    return parsed
  }
  const read = host.readFile.bind(host)
  const exists = host.fileExists.bind(host)
  host.readFile = (file) => overlay.get(path.resolve(file)) ?? read(file)
  host.fileExists = (file) => overlay.has(path.resolve(file)) || exists(file)
  const roots = [
    ...new Set([
      ...tsFiles(libRoot).filter((f) => !f.endsWith('.d.ts') || f.endsWith('tar-stream.d.ts')),
      ...overlay.keys(),
    ]),
  ]
  const program = ts.createProgram({ rootNames: roots, options: { ...config.options, noEmit: true }, host, oldProgram })
  const files = only?.map((f) => program.getSourceFile(path.join(driversDir, f))!)
  const diagnostics = files
    ? files.flatMap((f) => [...program.getSyntacticDiagnostics(f), ...program.getSemanticDiagnostics(f)])
    : ts.getPreEmitDiagnostics(program)
  const errors = diagnostics.map(
    (d) =>
      `${d.file ? path.relative(repoRoot, d.file.fileName) : ''}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`,
  )
  return { errors, program }
}

describe('a new driver', () => {
  it('compiles with only lib/drivers/ changed; a name without a driver, or a capability left out, does not', () => {
    const added = typeErrors(withRemoteDriver({ registered: true, capabilities: ALL_CAPABILITIES }))
    expect(added.errors).toEqual([])

    // Where the error must show (the rest of lib/ was just checked with the same files around it).
    const edited = ['names.ts', 'registry.ts', 'remote.ts']
    const unregistered = typeErrors(
      withRemoteDriver({ registered: false, capabilities: ALL_CAPABILITIES }),
      added.program,
      edited,
    ).errors
    expect(unregistered).toEqual([expect.stringMatching(/^lib\/drivers\/registry\.ts: .*remote/s)])

    const unsaid = typeErrors(
      withRemoteDriver({ registered: true, capabilities: ALL_CAPABILITIES.replace('fork: false, ', '') }),
      added.program,
      edited,
    ).errors
    expect(unsaid).toEqual([expect.stringMatching(/^lib\/drivers\/remote\.ts: .*fork/s)])
  }, 120_000)
})

describe('driver names', () => {
  // Quoted as a value ('krun' or "krun"); a doc comment's `krun` is prose.
  const literal = new RegExp(`(['"])(${DRIVER_NAMES.join('|')})\\1`)

  it('are spelled as string literals only in lib/drivers/', () => {
    const found = tsFiles(libRoot)
      .filter((f) => !f.startsWith(driversDir + path.sep) && !f.endsWith('.gen.ts'))
      .flatMap((f) =>
        fs
          .readFileSync(f, 'utf8')
          .split('\n')
          .flatMap((line, i) => (literal.test(line) ? [`${path.relative(repoRoot, f)}:${i + 1}: ${line.trim()}`] : [])),
      )
    expect(found).toEqual([])
  })

  it('the check above sees a name spelled outside lib/drivers/', () => {
    expect(literal.test("if (driver === 'krun') return")).toBe(true)
    expect(literal.test('driver: "namespace",')).toBe(true)
    expect(literal.test("the krun driver's namespace")).toBe(false)
  })
})
