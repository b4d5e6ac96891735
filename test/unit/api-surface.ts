/**
 * The public surface of a bundled declaration file, as one line per name: every declaration with
 * its kind, and every public member of a class or interface. Declarations the bundle holds but
 * does not export (SnapshotStore, SandboxPool: reachable as `rt.snapshots`, `rt.pool()`) count
 * too, since a caller reaches their members all the same. Read with the TypeScript compiler's own
 * parser, so it sees what a caller's compiler sees.
 */
import ts from 'typescript'

export interface SurfaceEntry {
  /** `Sandbox`, `Sandbox#exec` (instance member) or `Sandbox.create` (static member). */
  name: string
  kind: string
  /** Types and type members are documented by the d.ts itself; values need prose too. */
  typeOnly: boolean
}

/** The surface of one d.ts text, sorted by name. */
export function listSurface(dtsText: string, fileName = 'index.d.ts'): SurfaceEntry[] {
  const source = ts.createSourceFile(fileName, dtsText, ts.ScriptTarget.Latest, true)
  const declarations = new Map<string, ts.Statement[]>()
  const exported = new Map<string, string>() // public name → local name
  const typeOnlyExports = new Set<string>()
  for (const statement of source.statements) {
    const local = declaredName(statement)
    if (local) declarations.set(local, [...(declarations.get(local) ?? []), statement])
    if (local && hasModifier(statement, ts.SyntaxKind.ExportKeyword)) exported.set(local, local)
    if (ts.isExportDeclaration(statement) && statement.exportClause && ts.isNamedExports(statement.exportClause)) {
      for (const el of statement.exportClause.elements) {
        exported.set(el.name.text, (el.propertyName ?? el.name).text)
        if (el.isTypeOnly || statement.isTypeOnly) typeOnlyExports.add(el.name.text)
      }
    }
  }
  const publicNames = new Map([...exported].map(([publicName, localName]) => [localName, publicName]))
  const out: SurfaceEntry[] = []
  for (const [localName, decls] of declarations) {
    const publicName = publicNames.get(localName)
    const name = publicName ?? localName
    for (const decl of decls) {
      const reachableAsValue = publicName !== undefined && !typeOnlyExports.has(publicName)
      const kind = reachableAsValue ? kindOf(decl) : `${kindOf(decl)} (${publicName ? 'type export' : 'not exported'})`
      // A class is run by callers however they got hold of an instance; the rest is only type.
      out.push({
        name,
        kind,
        typeOnly:
          !ts.isClassDeclaration(decl) &&
          (!reachableAsValue || ts.isInterfaceDeclaration(decl) || ts.isTypeAliasDeclaration(decl)),
      })
      // A class exported as a type only, or not at all, has no name to call `new` on.
      if (ts.isClassDeclaration(decl))
        out.push(...classMembers(name, decl).filter((m) => reachableAsValue || m.kind !== 'constructor'))
      if (ts.isInterfaceDeclaration(decl)) out.push(...interfaceMembers(name, decl))
    }
  }
  const unique = new Map(out.map((e) => [`${e.name} ${e.kind}`, e]))
  return [...unique.values()].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : a.kind < b.kind ? -1 : 1))
}

/** The committed form: `name kind` per line. */
export function formatSurface(entries: SurfaceEntry[]): string {
  return entries.map((e) => `${e.name} ${e.kind}`).join('\n') + '\n'
}

/**
 * Entries a caller can run (classes, their members, functions, constants) that no document
 * mentions as code (a `code span` or a fenced block): an internal that leaked, or an API
 * nobody wrote down. A constructor must appear as `new Class(`, a disposer as `await using`.
 */
export function undocumented(entries: SurfaceEntry[], markdown: string): SurfaceEntry[] {
  const code = codeOf(markdown)
  return entries.filter((e) => !e.typeOnly && !mentioned(e, code))
}

function mentioned(entry: SurfaceEntry, code: string): boolean {
  const [, owner, member] = /^([\w$]+)(?:[#.](.+))?$/.exec(entry.name) ?? []
  if (member === undefined) return new RegExp(`\\b${owner}\\b`).test(code)
  if (member === 'constructor') return code.includes(`new ${owner}(`)
  if (member === '[Symbol.asyncDispose]') return code.includes('await using')
  const symbol = /^\[Symbol\.(\w+)\]$/.exec(member)
  if (symbol) return code.includes(`Symbol.${symbol[1]}`)
  return new RegExp(`(?<![\\w$])${member.replace(/\$/g, '\\$')}(?![\\w$])`).test(code)
}

/** The code of a Markdown text: its fenced blocks and its `code spans`, one per line. */
function codeOf(markdown: string): string {
  const fenced = [...markdown.matchAll(/^ *```[^\n]*\n([\s\S]*?)^ *```/gm)].map((m) => m[1])
  const prose = markdown.replace(/^ *```[^\n]*\n[\s\S]*?^ *```/gm, '')
  const spans = [...prose.matchAll(/`([^`\n]+)`/g)].map((m) => m[1])
  return [...fenced, ...spans].join('\n')
}

function declaredName(statement: ts.Statement): string | null {
  if (
    ts.isClassDeclaration(statement) ||
    ts.isFunctionDeclaration(statement) ||
    ts.isInterfaceDeclaration(statement) ||
    ts.isTypeAliasDeclaration(statement) ||
    ts.isEnumDeclaration(statement)
  ) {
    return statement.name?.text ?? null
  }
  if (ts.isVariableStatement(statement)) {
    const [first] = statement.declarationList.declarations
    return first && ts.isIdentifier(first.name) ? first.name.text : null
  }
  return null
}

function kindOf(decl: ts.Statement): string {
  if (ts.isClassDeclaration(decl)) return 'class'
  if (ts.isFunctionDeclaration(decl)) return 'function'
  if (ts.isInterfaceDeclaration(decl)) return 'interface'
  if (ts.isTypeAliasDeclaration(decl)) return 'type'
  if (ts.isEnumDeclaration(decl)) return 'enum'
  return 'const'
}

function hasModifier(node: ts.Node, kind: ts.SyntaxKind): boolean {
  return ts.canHaveModifiers(node) && (ts.getModifiers(node) ?? []).some((m) => m.kind === kind)
}

function memberKey(member: ts.ClassElement | ts.TypeElement): string | null {
  if (ts.isConstructorDeclaration(member)) return 'constructor'
  if (ts.isConstructSignatureDeclaration(member)) return 'new'
  if (ts.isCallSignatureDeclaration(member)) return '()'
  if (ts.isIndexSignatureDeclaration(member)) return '[index]'
  const name = member.name
  if (!name) return null
  if (ts.isPrivateIdentifier(name)) return null // #private: unreachable from outside
  if (ts.isComputedPropertyName(name)) return `[${name.expression.getText()}]`
  return name.getText()
}

function memberKind(member: ts.ClassElement | ts.TypeElement): string {
  if (ts.isMethodDeclaration(member) || ts.isMethodSignature(member)) return 'method'
  if (ts.isGetAccessor(member)) return 'getter'
  if (ts.isSetAccessor(member)) return 'setter'
  if (ts.isConstructorDeclaration(member) || ts.isConstructSignatureDeclaration(member)) return 'constructor'
  return hasModifier(member, ts.SyntaxKind.ReadonlyKeyword) ? 'readonly property' : 'property'
}

function classMembers(owner: string, decl: ts.ClassDeclaration): SurfaceEntry[] {
  const out: SurfaceEntry[] = []
  for (const member of decl.members) {
    if (hasModifier(member, ts.SyntaxKind.PrivateKeyword) || hasModifier(member, ts.SyntaxKind.ProtectedKeyword))
      continue
    const key = memberKey(member)
    if (key === null) continue
    const isStatic = hasModifier(member, ts.SyntaxKind.StaticKeyword)
    out.push({
      name: `${owner}${isStatic || key === 'constructor' ? '.' : '#'}${key}`,
      kind: memberKind(member),
      typeOnly: false,
    })
  }
  return out
}

function interfaceMembers(owner: string, decl: ts.InterfaceDeclaration): SurfaceEntry[] {
  const out: SurfaceEntry[] = []
  for (const member of decl.members) {
    const key = memberKey(member)
    if (key === null) continue
    const optional = 'questionToken' in member && member.questionToken ? '?' : ''
    out.push({ name: `${owner}#${key}${optional}`, kind: memberKind(member), typeOnly: true })
  }
  return out
}
