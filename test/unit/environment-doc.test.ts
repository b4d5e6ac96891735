/**
 * docs/environment.md names every KRUNBOX_* variable the sources read or set: the library, the
 * agent, the build scripts and the native code (include guards aside) are grepped, and each
 * name found must be a row of its table or one of the names it explains are not variables.
 */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'

const repoRoot = path.resolve(import.meta.dirname, '..', '..')
const SOURCE_DIRS = ['lib', 'agent', 'scripts', 'native']
const NAME = /KRUNBOX_[A-Z0-9_]+/g

function files(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name)
    if (e.isDirectory()) return e.name === 'dist' || e.name === 'node_modules' ? [] : files(p)
    return /\.(ts|go|sh|c|cc|h|mjs|js)$/.test(e.name) ? [p] : []
  })
}

/** Every KRUNBOX_* name in the sources, with a file that has it; an include guard (`_H` in a header) is no variable. */
function namesInSources(): Map<string, string> {
  const found = new Map<string, string>()
  for (const dir of SOURCE_DIRS) {
    for (const file of files(path.join(repoRoot, dir))) {
      for (const [name] of fs.readFileSync(file, 'utf8').matchAll(NAME)) {
        if (file.endsWith('.h') && name.endsWith('_H')) continue
        if (!found.has(name)) found.set(name, path.relative(repoRoot, file))
      }
    }
  }
  return found
}

/** The names docs/environment.md covers: its table's first column, and the ones it says are not variables. */
function documentedNames(markdown: string): Set<string> {
  const rows = [...markdown.matchAll(/^\| `(KRUNBOX_[A-Z0-9_]+)` \|/gm)].map((m) => m[1])
  const notVariables = markdown.slice(markdown.indexOf('Not variables')).match(/`KRUNBOX_[A-Z0-9_]+`/g) ?? []
  return new Set([...rows, ...notVariables.map((n) => n.slice(1, -1))])
}

describe('docs/environment.md', () => {
  const doc = fs.readFileSync(path.join(repoRoot, 'docs', 'environment.md'), 'utf8')

  it('documents every KRUNBOX_* name in lib/, agent/, scripts/ and native/', () => {
    const documented = documentedNames(doc)
    const sources = namesInSources()
    expect(sources.has('KRUNBOX_AGENT_PATH')).toBe(true)
    const missing = [...sources].filter(([name]) => !documented.has(name)).map(([name, file]) => `${name} (${file})`)
    expect(missing).toEqual([])
  })

  it('is linked from the README', () => {
    expect(fs.readFileSync(path.join(repoRoot, 'README.md'), 'utf8')).toContain('(docs/environment.md)')
  })

  it('the check sees a name missing from the table', () => {
    expect(documentedNames('| `KRUNBOX_A` | x | y |\n').has('KRUNBOX_B')).toBe(false)
    expect(documentedNames('| `KRUNBOX_A` | x | y |\n').has('KRUNBOX_A')).toBe(true)
  })
})
