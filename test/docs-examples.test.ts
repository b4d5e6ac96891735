/**
 * Every code example of the README and docs runs. Blocks are extracted from the
 * Markdown: ```ts and ```js blocks run with tsx against the built package (imported as
 * 'krunbox'), ```sh blocks run with sh -e and the built CLI as `krunbox` on PATH. A block that
 * must not run here (it installs system packages, or runs the whole suite) is preceded by
 * `<!-- not run: why -->`; blocks in other languages (text, layouts) are not examples.
 * (Issue 16.)
 */
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { afterAll, describe, expect, it } from 'vitest'

const run = promisify(execFile)
const repoRoot = path.resolve(import.meta.dirname, '..')
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-docs-'))

interface Block {
  file: string
  line: number
  lang: string
  code: string
  notRun: string | null
}

/** Fenced blocks with their language and the `not run` reason on the line before, if any. */
function extractBlocks(file: string, text: string): Block[] {
  const lines = text.split('\n')
  const blocks: Block[] = []
  for (let i = 0; i < lines.length; i++) {
    const open = /^( *)```(\w*)\s*$/.exec(lines[i])
    if (!open) continue
    const [, indent, lang] = open
    const start = i
    const body: string[] = []
    for (i++; i < lines.length && lines[i] !== `${indent}\`\`\``; i++) body.push(lines[i].slice(indent.length))
    const before =
      lines
        .slice(0, start)
        .reverse()
        .find((l) => l.trim() !== '') ?? ''
    const notRun = /<!-- not run: (.+?) -->/.exec(before)?.[1] ?? null
    blocks.push({ file, line: start + 1, lang, code: body.join('\n') + '\n', notRun })
  }
  return blocks
}

const sources = [
  'README.md',
  ...fs
    .readdirSync(path.join(repoRoot, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
]
const examples = sources
  .flatMap((file) => extractBlocks(file, fs.readFileSync(path.join(repoRoot, file), 'utf8')))
  .filter((b) => ['ts', 'js', 'sh'].includes(b.lang))

// The package as a user imports it, and the CLI as a user runs it.
fs.mkdirSync(path.join(work, 'node_modules'))
fs.symlinkSync(repoRoot, path.join(work, 'node_modules', 'krunbox'))
// The optional peer dependency docs/telemetry.md imports.
fs.symlinkSync(path.join(repoRoot, 'node_modules', '@opentelemetry'), path.join(work, 'node_modules', '@opentelemetry'))
fs.mkdirSync(path.join(work, 'bin'))
fs.writeFileSync(
  path.join(work, 'bin', 'krunbox'),
  `#!/bin/sh\nexec node ${JSON.stringify(path.join(repoRoot, 'dist/cli.js'))} "$@"\n`,
  { mode: 0o755 },
)
const env = {
  ...process.env,
  PATH: `${path.join(work, 'bin')}:${process.env.PATH}`,
  XDG_STATE_HOME: path.join(work, 'state'),
  XDG_CONFIG_HOME: path.join(work, 'config'),
}

afterAll(() => {
  fs.rmSync(work, { recursive: true, force: true })
})

describe('README and docs code examples', () => {
  it('every example block runs, or says why not', () => {
    console.log(
      `docs examples: ${examples.filter((b) => !b.notRun).length} run, ${examples.filter((b) => b.notRun).length} not run (with a reason)`,
    )
    expect(examples.filter((b) => !b.notRun).length).toBeGreaterThan(0)
    for (const b of examples) if (b.notRun !== null) expect(b.notRun.length, `${b.file}:${b.line}`).toBeGreaterThan(5)
  })

  for (const [i, b] of examples.entries()) {
    it.skipIf(b.notRun !== null)(
      `${b.file}:${b.line} (${b.lang})`,
      async () => {
        if (b.lang === 'sh') {
          await run('sh', ['-ec', b.code], { cwd: work, env, timeout: 120_000 })
          return
        }
        const file = path.join(work, `example-${i}.${b.lang === 'ts' ? 'mts' : 'mjs'}`)
        fs.writeFileSync(file, b.code)
        await run('node', [path.join(repoRoot, 'node_modules/tsx/dist/cli.mjs'), file], {
          cwd: work,
          env,
          timeout: 120_000,
        })
      },
      180_000,
    )
  }
})
