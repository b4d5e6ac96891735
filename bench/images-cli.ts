/**
 * Benchmark, images and CLI (issue 7):
 * - per preset: cold build time into a fresh temporary cache (the CLI's `images build`, which
 *   includes downloading the packages from the archive), the no-op rebuild (CLI and API),
 *   size on disk;
 * - `krunbox run base -- true` end to end (node dist/cli.js, a new process each time) p50/p95,
 *   beside `bwrap --unshare-all --ro-bind <base rootfs> / true` and the CLI's bare start-up
 *   (`krunbox help`), interleaved in the same run.
 * Usage: npx tsx bench/images-cli.ts [--runs 25] [--budget 150] [--skip-cold]
 *   --budget: seconds of cold building after which the remaining presets are skipped.
 */
import { execFileSync, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { ImageStore } from '../lib/images/index.js'

const { values } = parseArgs({
  options: {
    runs: { type: 'string', default: '25' },
    budget: { type: 'string', default: '150' },
    'skip-cold': { type: 'boolean', default: false },
  },
})
const RUNS = Math.max(20, Number(values.runs))
const COLD_BUDGET_MS = Number(values.budget) * 1000
const PRESETS = ['base', 'python', 'node', 'python-node']

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const cli = path.join(root, 'dist', 'cli.js')

function percentile(samples: number[], p: number): number {
  const sorted = [...samples].sort((a, b) => a - b)
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]
}

const ms = (n: number) => `${n < 100 ? n.toFixed(1) : Math.round(n)} ms`
const sec = (n: number) => `${(n / 1000).toFixed(1)} s`
const mib = (bytes: number) => `${(bytes / 1048576).toFixed(1)} MiB`

function table(header: string[], rows: string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)))
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i])).join('  ')
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n')
}

/** Wall time of one process, spawn to exit; throws when it fails. */
function timed(file: string, args: string[], env: NodeJS.ProcessEnv = process.env): { ms: number; stdout: string } {
  const started = performance.now()
  const r = spawnSync(file, args, { env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], timeout: 600_000 })
  const elapsed = performance.now() - started
  if (r.status !== 0) throw new Error(`${file} ${args.join(' ')} exited ${r.status}: ${r.stderr}`)
  return { ms: elapsed, stdout: r.stdout }
}

function ensureCliBuilt(): void {
  const newest = (p: string): number => {
    const st = fs.statSync(p)
    return st.isDirectory()
      ? Math.max(st.mtimeMs, ...fs.readdirSync(p).map((n) => newest(path.join(p, n))))
      : st.mtimeMs
  }
  const built = fs.statSync(cli, { throwIfNoEntry: false })?.mtimeMs ?? 0
  if (built > newest(path.join(root, 'lib'))) return
  console.log('building dist/ (older than lib/) ...')
  execFileSync('npx', ['tsup', '--silent'], { cwd: root, stdio: 'ignore' })
}

function diskUsage(dir: string): number {
  return Number(execFileSync('du', ['-sk', dir], { encoding: 'utf8' }).split('\t')[0]) * 1024
}

async function coldBuilds(): Promise<string> {
  const cacheHome = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-bench-cache-'))
  const env = { ...process.env, XDG_CACHE_HOME: cacheHome }
  const store = new ImageStore({ cacheDir: path.join(cacheHome, 'krunbox', 'images') })
  const rows: string[][] = []
  const notes: string[] = []
  let spent = 0
  try {
    for (const name of PRESETS) {
      if (spent > COLD_BUDGET_MS) {
        notes.push(`${name}: cold build skipped (over the --budget of ${COLD_BUDGET_MS / 1000} s of cold building)`)
        continue
      }
      process.stdout.write(`cold build of ${name} ... `)
      const cold = timed(process.execPath, [cli, 'images', 'build', name], env)
      spent += cold.ms
      const id = cold.stdout.trim()
      console.log(sec(cold.ms))
      const noopCli = timed(process.execPath, [cli, 'images', 'build', name], env)
      if (noopCli.stdout.trim() !== id) throw new Error(`no-op rebuild of ${name} gave another id`)
      const apiStart = performance.now()
      const again = await store.build(name)
      const noopApi = performance.now() - apiStart
      if (again.built !== false) throw new Error(`the API rebuilt ${name}`)
      rows.push([
        name,
        id.slice(0, 12),
        sec(cold.ms),
        ms(noopCli.ms),
        ms(noopApi),
        mib(again.manifest.sizeBytes),
        mib(diskUsage(path.dirname(again.rootfs))),
        String(again.manifest.fileCount),
      ])
    }
  } finally {
    fs.rmSync(cacheHome, { recursive: true, force: true })
  }
  return [
    table(['preset', 'id', 'cold build', 'no-op (CLI)', 'no-op (API)', 'size', 'on disk (du)', 'files'], rows),
    'cold = fresh image cache, packages downloaded from the archive; no-op (CLI) includes node start-up',
    ...notes,
  ].join('\n')
}

async function endToEnd(): Promise<string> {
  const base = await new ImageStore().resolve('base')
  const stateHome = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-bench-state-'))
  const env = { ...process.env, XDG_STATE_HOME: stateHome, XDG_CONFIG_HOME: stateHome }
  const runs = { cli: [] as number[], bwrap: [] as number[], startup: [] as number[] }
  const one = {
    cli: () => timed(process.execPath, [cli, 'run', 'base', '--', 'true'], env).ms,
    bwrap: () => timed('bwrap', ['--unshare-all', '--ro-bind', base.rootfs, '/', 'true']).ms,
    startup: () => timed(process.execPath, [cli, 'help'], env).ms,
  }
  try {
    for (let i = 0; i < 2; i++) for (const f of Object.values(one)) f() // warm page cache
    for (let i = 0; i < RUNS; i++) for (const [k, f] of Object.entries(one)) runs[k as keyof typeof runs].push(f())
  } finally {
    fs.rmSync(stateHome, { recursive: true, force: true })
  }
  const bwrapP50 = percentile(runs.bwrap, 50)
  const row = (label: string, s: number[]) => [
    label,
    ms(percentile(s, 50)),
    ms(percentile(s, 95)),
    ms(Math.min(...s)),
    `${(percentile(s, 50) / bwrapP50).toFixed(1)}x`,
  ]
  return [
    table(
      ['end to end (n=' + RUNS + ')', 'p50', 'p95', 'min', 'p50 / bwrap p50'],
      [
        row('krunbox run base -- true', runs.cli),
        row('bwrap --unshare-all --ro-bind <base> / true', runs.bwrap),
        row('krunbox help (CLI start-up only)', runs.startup),
      ],
    ),
    `krunbox run minus CLI start-up (p50): ${ms(percentile(runs.cli, 50) - percentile(runs.startup, 50))}`,
  ].join('\n')
}

ensureCliBuilt()
const startedAt = performance.now()
const sections: string[] = []
if (!values['skip-cold']) sections.push(await coldBuilds())
sections.push(await endToEnd())
console.log('\n' + sections.join('\n\n'))
console.log(`\n(bench took ${sec(performance.now() - startedAt)}; ${os.cpus().length} cores, ${os.release()})`)
