/**
 * lib/ has no import cycle: a module may lean on another only if that one does not lean back,
 * directly or through others. Not at run time, and not through type-only imports either (they
 * vanish from the built code, but a circle of types still ties two modules into one).
 */
import fs from 'node:fs'
import path from 'node:path'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'

const libRoot = path.resolve(import.meta.dirname, '..', '..', 'lib')

function tsFiles(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name)
    return e.isDirectory() ? tsFiles(p) : e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [p] : []
  })
}

/** The lib/ modules a file imports at run time (relative specifiers; `import type` and all-type named imports left out), or with `types` every one. */
export function runtimeImports(file: string, text: string, { types = false } = {}): string[] {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, false)
  const out: string[] = []
  for (const st of source.statements) {
    let spec: ts.Expression | undefined
    if (ts.isImportDeclaration(st)) {
      const clause = st.importClause
      if (clause?.isTypeOnly && !types) continue
      const named = clause?.namedBindings
      const allTypes =
        clause &&
        !clause.name &&
        named &&
        ts.isNamedImports(named) &&
        named.elements.length > 0 &&
        named.elements.every((e) => e.isTypeOnly)
      if (allTypes && !types) continue
      spec = st.moduleSpecifier
    } else if (ts.isExportDeclaration(st) && (types || !st.isTypeOnly) && st.moduleSpecifier) {
      const named = st.exportClause
      if (
        !types &&
        named &&
        ts.isNamedExports(named) &&
        named.elements.length > 0 &&
        named.elements.every((e) => e.isTypeOnly)
      )
        continue
      spec = st.moduleSpecifier
    }
    if (!spec || !ts.isStringLiteral(spec) || !spec.text.startsWith('.')) continue
    out.push(path.resolve(path.dirname(file), spec.text.replace(/\.js$/, '.ts')))
  }
  return out
}

/** Every cycle found by a depth-first walk, each as the chain of files that closes it. */
export function findCycles(graph: Map<string, string[]>): string[][] {
  const cycles: string[][] = []
  const done = new Set<string>()
  const stack: string[] = []
  const visit = (node: string) => {
    const at = stack.indexOf(node)
    if (at >= 0) {
      cycles.push([...stack.slice(at), node])
      return
    }
    if (done.has(node)) return
    stack.push(node)
    for (const next of graph.get(node) ?? []) visit(next)
    stack.pop()
    done.add(node)
  }
  for (const node of graph.keys()) visit(node)
  return cycles
}

describe('lib/ imports', () => {
  it('form no cycle (type-only imports excluded)', () => {
    const graph = new Map(tsFiles(libRoot).map((f) => [f, runtimeImports(f, fs.readFileSync(f, 'utf8'))]))
    expect(graph.size).toBeGreaterThan(50)
    const cycles = findCycles(graph).map((c) => c.map((f) => path.relative(libRoot, f)).join(' → '))
    expect(cycles).toEqual([])
  })

  it('form no cycle through type-only imports either', () => {
    const graph = new Map(
      tsFiles(libRoot).map((f) => [f, runtimeImports(f, fs.readFileSync(f, 'utf8'), { types: true })]),
    )
    const cycles = findCycles(graph).map((c) => c.map((f) => path.relative(libRoot, f)).join(' → '))
    expect(cycles).toEqual([])
  })

  it('the walk sees a cycle through a value import, and none through a type-only one', () => {
    const a = '/x/a.ts'
    const b = '/x/b.ts'
    const c = '/x/c.ts'
    const graph = (bText: string) =>
      new Map([
        [a, runtimeImports(a, "import { b } from './b.js'")],
        [b, runtimeImports(b, bText)],
        [c, runtimeImports(c, '')],
      ])
    expect(findCycles(graph("import { c } from './c.js'\nimport { a } from './a.js'"))).toEqual([[a, b, a]])
    expect(findCycles(graph("import type { A } from './a.js'"))).toEqual([])
    expect(findCycles(graph("import { type A } from './a.js'"))).toEqual([])
    expect(findCycles(graph("import { type A, a } from './a.js'"))).toEqual([[a, b, a]])
    const withTypes = new Map([
      [a, runtimeImports(a, "import { b } from './b.js'", { types: true })],
      [b, runtimeImports(b, "import type { A } from './a.js'", { types: true })],
    ])
    expect(findCycles(withTypes)).toEqual([[a, b, a]])
  })
})
