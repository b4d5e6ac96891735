/**
 * Runs the benchmarks one after another, each in its own Node process (so one's sandboxes,
 * heap and timers cannot skew the next one's figures) and each on a quiet machine (the kernel
 * tears down the previous one's sandboxes for a while after it ends: after 1 000 of them, the
 * next one's creates ran up to 1.5× slower), and prints their output as it comes.
 * Missed targets are figures, not failures: the exit code is non-zero only if a benchmark
 * crashed.
 *
 * Usage: node --import tsx bench/run.ts [name …]   (names without .ts; default: all of bench/)
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { quietMachine } from './support/host.js'

const here = path.dirname(fileURLToPath(import.meta.url))
/** The order they run in when no names are given; other bench/*.ts files follow alphabetically. */
const ORDER = ['create-exec', 'commands', 'deadlines', 'fs', 'runtime', 'krun-vm', 'images-cli']

const present = fs
  .readdirSync(here)
  .filter((f) => f.endsWith('.ts') && f !== 'run.ts')
  .map((f) => f.slice(0, -3))
const known = [...ORDER.filter((n) => present.includes(n)), ...present.filter((n) => !ORDER.includes(n)).sort()]
const wanted = process.argv.slice(2)
const unknown = wanted.filter((n) => !present.includes(n))
if (unknown.length > 0) {
  console.error(`unknown benchmark ${unknown.join(', ')}; available: ${known.join(', ')}`)
  process.exit(2)
}

const failed: string[] = []
for (const name of wanted.length > 0 ? wanted : known) {
  console.log(`\n#### bench/${name}.ts`)
  const quiet = await quietMachine()
  console.log(
    `#### waited ${(quiet.waitedMs / 1000).toFixed(0)} s for a quiet machine (the last second ${(quiet.busy * 100).toFixed(1)} % busy)`,
  )
  const t0 = performance.now()
  const run = spawnSync(process.execPath, ['--expose-gc', '--import', 'tsx', path.join(here, `${name}.ts`)], {
    cwd: path.dirname(here),
    stdio: 'inherit',
  })
  const seconds = ((performance.now() - t0) / 1000).toFixed(1)
  if (run.status !== 0) {
    failed.push(name)
    console.log(`#### bench/${name}.ts crashed (${run.signal ?? `exit code ${run.status}`}) after ${seconds} s`)
  } else console.log(`#### bench/${name}.ts done in ${seconds} s`)
}
if (failed.length > 0) {
  console.log(`\ncrashed: ${failed.join(', ')}`)
  process.exitCode = 1
}
