/**
 * Every Markdown link in what the package ships (package.json "files": README, docs/,
 * PROTOCOL.md, ERRORS.md, CHANGELOG.md) resolves inside the package: a relative link names a
 * shipped file, and an anchor (`file.md#part`, `#part`) names a heading or an explicit id there.
 * The shipped list is npm's own (`npm pack --dry-run`), without building anything.
 * (Issue 31.)
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'

const repoRoot = path.resolve(import.meta.dirname, '../..')

function shippedFiles(): string[] {
  const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], {
    cwd: repoRoot,
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  })
  return (JSON.parse(out)[0].files as { path: string }[]).map((f) => f.path)
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens, repeats numbered. */
function anchorsOf(markdown: string): Set<string> {
  const anchors = new Set<string>()
  const seen = new Map<string, number>()
  let fenced = false
  for (const line of markdown.split('\n')) {
    if (/^\s*```/.test(line)) fenced = !fenced
    if (fenced) continue
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line)
    if (heading) {
      const text = heading[1].replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
      const base = text
        .toLowerCase()
        .replace(/[^\p{L}\p{N}\s_-]/gu, '')
        .replace(/\s/g, '-')
      const n = seen.get(base) ?? 0
      seen.set(base, n + 1)
      anchors.add(n === 0 ? base : `${base}-${n}`)
    }
    for (const [, id] of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) anchors.add(id)
  }
  return anchors
}

/** Links outside code: [text](target), ![alt](target) and [ref]: target definitions. */
function linksOf(markdown: string): string[] {
  const prose = markdown.replace(/^\s*```[\s\S]*?^\s*```/gm, '').replace(/`[^`\n]*`/g, '')
  const inline = [...prose.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)].map((m) => m[1])
  const refs = [...prose.matchAll(/^\s*\[[^\]]+\]:\s*(\S+)/gm)].map((m) => m[1])
  return [...inline, ...refs]
}

describe('shipped Markdown links', () => {
  const files = shippedFiles()
  const markdown = files.filter((f) => f.endsWith('.md'))

  it('the walker sees links, anchors and explicit ids, and not what code spans or fences hold', () => {
    const sample =
      '# A `b` heading\n## Twice\n## Twice\n<a id="x1"></a>\n[t](docs/a.md#sec) `[no](c.md)`\n```\n[no](d.md)\n```\n[r]: e.md\n'
    expect([...anchorsOf(sample)]).toEqual(['a-b-heading', 'twice', 'twice-1', 'x1'])
    expect(linksOf(sample)).toEqual(['docs/a.md#sec', 'e.md'])
  })

  it('the walk covers what the package says it ships', () => {
    for (const f of [
      'README.md',
      'PROTOCOL.md',
      'ERRORS.md',
      'CHANGELOG.md',
      'docs/api.md',
      'docs/install.md',
      'docs/security.md',
    ])
      expect(markdown).toContain(f)
  })

  it('every relative link names a shipped file, and every anchor a heading or id of it', () => {
    const anchors = new Map(markdown.map((f) => [f, anchorsOf(fs.readFileSync(path.join(repoRoot, f), 'utf8'))]))
    const broken: string[] = []
    let checked = 0
    for (const file of markdown) {
      for (const target of linksOf(fs.readFileSync(path.join(repoRoot, file), 'utf8'))) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue // http:, https:, mailto:
        checked++
        const [rel, anchor] = target.split('#') as [string, string | undefined]
        const resolved =
          rel === '' ? file : path.posix.normalize(path.posix.join(path.posix.dirname(file), decodeURIComponent(rel)))
        const isFile = files.includes(resolved)
        const isDir = files.some((f) => f.startsWith(resolved.replace(/\/?$/, '/')))
        if (!isFile && !isDir) {
          broken.push(`${file}: ${target} (not shipped)`)
          continue
        }
        if (anchor !== undefined && resolved.endsWith('.md') && !anchors.get(resolved)?.has(decodeURIComponent(anchor)))
          broken.push(`${file}: ${target} (no such anchor in ${resolved})`)
      }
    }
    expect(broken).toEqual([])
    expect(checked).toBeGreaterThan(10)
  })
})
