#!/usr/bin/env node
/**
 * One-shot codemod (not shipped): `new SandboxError('S211', MESSAGES.fsNotFound({ … }), opts)`
 * becomes `errors.fsNotFound({ … }, opts)`, the constructor lib/protocol/errors.gen.ts generates
 * from the contract. Only a call whose code is the code of the message it names is rewritten;
 * anything else (a code chosen at run time, a message that is not a template) is listed and left
 * alone. Each rewritten file imports `errors` and drops MESSAGES / SandboxError imports it no
 * longer uses.
 *
 *   node scripts/codemods/errors.mjs [LIB_DIR]     rewrite LIB_DIR (default: lib/) in place
 *   node scripts/codemods/errors.mjs LIB_DIR --dry count what would change, write nothing
 *
 * It prints one summary line on stdout (JSON: files, rewritten, skipped) and the skipped call
 * sites on stderr. Run `npx tsc --noEmit` afterwards.
 */
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const GENERATED = new Set(['contract.gen.ts', 'errors.gen.ts'])

/** Index just past the string, template or comment starting at i (src[i] opens it). */
function skipLiteral(src, i) {
  const open = src[i]
  if (open === '/' && src[i + 1] === '/') return src.indexOf('\n', i) < 0 ? src.length : src.indexOf('\n', i)
  if (open === '/' && src[i + 1] === '*') return src.indexOf('*/', i + 2) + 2
  if (open === '/') {
    // A regular expression literal: to its closing slash, past classes and escapes.
    let inClass = false
    for (let j = i + 1; j < src.length; j++) {
      if (src[j] === '\\') j++
      else if (src[j] === '[') inClass = true
      else if (src[j] === ']') inClass = false
      else if (src[j] === '/' && !inClass) return j + 1
    }
    throw new Error(`unterminated regular expression at ${i}`)
  }
  for (let j = i + 1; j < src.length; j++) {
    if (src[j] === '\\') j++
    else if (src[j] === open) return j + 1
    else if (open === '`' && src[j] === '$' && src[j + 1] === '{') j = balanced(src, j + 1) - 1
  }
  throw new Error(`unterminated ${open} literal at ${i}`)
}

/** Whether a `/` at i starts a regular expression rather than dividing. */
function startsRegex(src, i) {
  let j = i - 1
  while (j >= 0 && /\s/.test(src[j])) j--
  return (
    j < 0 ||
    '(,=:[!&|?{};+-*%<>~^'.includes(src[j]) ||
    /\b(return|typeof|case|in|of)$/.test(src.slice(Math.max(0, j - 6), j + 1))
  )
}

/** Index just past the bracket that closes the one at i ('(', '{' or '['). */
function balanced(src, i) {
  const close = { '(': ')', '{': '}', '[': ']' }
  const stack = [close[src[i]]]
  for (let j = i + 1; j < src.length;) {
    const ch = src[j]
    if (
      ch === "'" ||
      ch === '"' ||
      ch === '`' ||
      (ch === '/' && (src[j + 1] === '/' || src[j + 1] === '*' || startsRegex(src, j)))
    ) {
      j = skipLiteral(src, j)
      continue
    }
    if (close[ch]) stack.push(close[ch])
    else if (ch === stack.at(-1)) {
      stack.pop()
      if (stack.length === 0) return j + 1
    }
    j++
  }
  throw new Error(`unbalanced ${src[i]} at ${i}`)
}

const CALL = /new SandboxError\(\s*'(S\d{3})',\s*MESSAGES\.(\w+)\(/g

/** The file's text with every matching construction rewritten, and what was skipped. */
export function rewrite(src, codeOf) {
  let out = ''
  let last = 0
  let rewritten = 0
  const skipped = []
  for (const m of src.matchAll(CALL)) {
    if (m.index < last) continue
    const [, code, name] = m
    const callOpen = m.index + 'new SandboxError'.length
    const end = balanced(src, callOpen)
    if (codeOf.get(name) !== code) {
      skipped.push(`${code} with MESSAGES.${name} (${codeOf.get(name) ?? 'no such template'})`)
      continue
    }
    const argsOpen = m.index + m[0].length - 1
    const argsEnd = balanced(src, argsOpen)
    const rest = src.slice(argsEnd, end - 1)
    const options = rest.replace(/^\s*,?\s*/, '').replace(/,?\s*$/, '')
    out +=
      src.slice(last, m.index) +
      `errors.${name}(${src.slice(argsOpen + 1, argsEnd - 1)}${options ? `, ${options}` : ''})`
    last = end
    rewritten++
  }
  return { text: out + src.slice(last), rewritten, skipped }
}

/** Drops a named import that the rest of the file no longer uses; removes an import left empty. */
function dropUnusedImport(text, name) {
  const lines = text.split('\n')
  const at = lines.findIndex((l) => l.startsWith('import ') && new RegExp(`[{,]\\s*(type\\s+)?${name}\\s*[,}]`).test(l))
  if (at < 0) return text
  const body = lines.filter((_, i) => i !== at).join('\n')
  if (new RegExp(`\\b${name}\\b`).test(body)) return text
  const line = lines[at]
  const specs = line
    .slice(line.indexOf('{') + 1, line.indexOf('}'))
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s && s.replace(/^type\s+/, '') !== name)
  if (specs.length === 0) lines.splice(at, 1)
  else lines[at] = `${line.slice(0, line.indexOf('{') + 1)} ${specs.join(', ')} ${line.slice(line.indexOf('}'))}`
  return lines.join('\n')
}

/** Adds `import { errors } from '…/protocol/errors.gen.js'` after the file's last import. */
function addImport(text, file, libDir) {
  let rel = path
    .relative(path.dirname(file), path.join(libDir, 'protocol', 'errors.gen.js'))
    .split(path.sep)
    .join('/')
  if (!rel.startsWith('.')) rel = `./${rel}`
  const lines = text.split('\n')
  let lastImport = -1
  for (let i = 0; i < lines.length; i++) {
    if (lines[i].startsWith('import ')) {
      lastImport = i
      // A multi-line import ends at its `from`.
      while (!/\bfrom\s+['"]/.test(lines[lastImport]) && !/^import\s+['"]/.test(lines[lastImport])) lastImport++
    }
  }
  lines.splice(lastImport + 1, 0, `import { errors } from '${rel}'`)
  return lines.join('\n')
}

function tsFiles(dir) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name)
    if (e.isDirectory()) return tsFiles(p)
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') && !GENERATED.has(e.name) ? [p] : []
  })
}

/** Rewrites every file under libDir; returns the counts. */
export function codemod(libDir, { dry = false } = {}) {
  const contract = JSON.parse(fs.readFileSync(path.join(ROOT, 'protocol/v1.json'), 'utf8'))
  const codeOf = new Map(contract.errors.map((e) => [e.name, e.code]))
  const summary = { files: 0, rewritten: 0, skipped: [] }
  for (const file of tsFiles(libDir)) {
    const src = fs.readFileSync(file, 'utf8')
    const { text, rewritten, skipped } = rewrite(src, codeOf)
    summary.skipped.push(...skipped.map((s) => `${path.relative(libDir, file)}: ${s}`))
    if (rewritten === 0) continue
    if (/\b(const|let|var|function|class)\s+errors\b/.test(src)) {
      summary.skipped.push(`${path.relative(libDir, file)}: has its own binding named errors (${rewritten} sites left)`)
      continue
    }
    let next = dropUnusedImport(dropUnusedImport(text, 'MESSAGES'), 'SandboxError')
    if (!/import \{ errors \} from/.test(next)) next = addImport(next, file, libDir)
    summary.files++
    summary.rewritten += rewritten
    if (!dry) fs.writeFileSync(file, next)
  }
  return summary
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2)
  const libDir = path.resolve(args.find((a) => !a.startsWith('--')) ?? path.join(ROOT, 'lib'))
  const { files, rewritten, skipped } = codemod(libDir, { dry: args.includes('--dry') })
  for (const s of skipped) console.error(`skipped: ${s}`)
  console.log(JSON.stringify({ files, rewritten, skipped: skipped.length }))
}
