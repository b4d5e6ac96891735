/**
 * Benchmark (issue 4): sb.fs write and read throughput for 1 MiB, 64 MiB and 1 GiB files
 * (streams of data), beside fs.copyFile of a same-size file on the host in the same run;
 * small-file operations per second (1 000 × 4 KiB); and sb.fs.grep over 10 000 files beside
 * `grep -r` run inside the sandbox by exec, in the same run.
 *
 * The sandbox's writable layer is a tmpfs inside the sandbox (charged to its memory), so the
 * sandbox gets diskMb and memoryMb enough for the 1 GiB file.
 *
 * Usage: node --import tsx bench/fs.ts [--sizes 1,64,1024] [--small 1000] [--files 10000]
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import fsp from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { parseArgs } from 'node:util'
import type { Sandbox } from '../lib/sandbox.js'
import { benchRuntime } from './support/host.js'
import { heading, note, row, target } from './support/report.js'
import { mbps, median, ms, percent, ratio } from './support/stats.js'

const { values } = parseArgs({
  options: {
    sizes: { type: 'string', default: '1,64,1024' },
    small: { type: 'string', default: '1000' },
    files: { type: 'string', default: '10000' },
  },
})
const SIZES_MIB = values.sizes.split(',').map(Number)
const SMALL = Number(values.small)
const FILES = Number(values.files)
const TARGET_SHARE = 0.4
const PIECE = crypto.randomBytes(1024 * 1024)
const TMPFS_MAGIC = 0x01021994

/** Rounds per size: enough to steady small sizes, few enough to keep 1 GiB quick. */
function roundsFor(mib: number): number {
  return mib <= 1 ? 100 : mib <= 64 ? 5 : 2
}

/** Untimed rounds first: a 1 MiB transfer takes under a millisecond, so the first few dozen
 * mostly time V8 compiling the stream code (copyFile, being native, needs no warm-up). */
function warmupsFor(mib: number): number {
  return mib <= 1 ? 30 : 1
}

/** `bytes` of data as a stream of 1 MiB pieces (the last one cut to size). */
function source(bytes: number): Readable {
  return Readable.from(
    (function* () {
      for (let left = bytes; left > 0; left -= PIECE.length)
        yield left >= PIECE.length ? PIECE : PIECE.subarray(0, left)
    })(),
    { objectMode: false },
  )
}

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now()
  await fn()
  return performance.now() - t0
}

async function sandboxWrite(sb: Sandbox, file: string, bytes: number): Promise<number> {
  return timed(async () => {
    const r = await sb.fs.writeFile(file, source(bytes))
    if (r.bytes !== bytes) throw new Error(`wrote ${r.bytes} of ${bytes} bytes to ${file}`)
  })
}

async function sandboxRead(sb: Sandbox, file: string, bytes: number): Promise<number> {
  return timed(async () => {
    const { stream } = await sb.fs.createReadStream(file)
    let got = 0
    for await (const piece of stream) got += (piece as Buffer).length
    if (got !== bytes) throw new Error(`read ${got} of ${bytes} bytes from ${file}`)
  })
}

async function hostFile(dir: string, bytes: number): Promise<string> {
  const file = path.join(dir, `src-${bytes}`)
  await pipeline(source(bytes), fs.createWriteStream(file))
  return file
}

const hostDir = fs.mkdtempSync(path.join(hostScratch(2 * Math.max(...SIZES_MIB) * 1024 * 1024), 'krunbox-bench-fs-'))
const { rt, dispose } = benchRuntime()
try {
  const maxMib = Math.max(...SIZES_MIB)
  const sb = await rt.create({ image: 'base', driver: 'namespace', diskMb: maxMib + 1024, memoryMb: maxMib * 2 + 1024 })
  await sb.fs.mkdir('/workspace/bench', { parents: true })

  heading('file throughput: sb.fs.writeFile(stream) / createReadStream, beside fs.copyFile on the host')
  note(
    `host files in ${hostDir} (${fs.statfsSync(hostDir).type === TMPFS_MAGIC ? 'tmpfs' : 'disk, page cache warm'}); sandbox files in its tmpfs writable layer`,
  )
  for (const mibs of SIZES_MIB) {
    const bytes = mibs * 1024 * 1024
    const rounds = roundsFor(mibs)
    const src = await hostFile(hostDir, bytes)
    const dst = path.join(hostDir, 'dst')
    const remote = `/workspace/bench/f-${mibs}`
    // Warm-up of each path, then interleaved rounds.
    for (let i = 0; i < warmupsFor(mibs); i++) {
      await fsp.copyFile(src, dst)
      await sandboxWrite(sb, remote, bytes)
      await sandboxRead(sb, remote, bytes)
    }
    const copyMs: number[] = []
    const writeMs: number[] = []
    const readMs: number[] = []
    for (let i = 0; i < rounds; i++) {
      // Targets removed first and untimed: replacing a file would time freeing the old one too.
      await fsp.rm(dst, { force: true })
      await sb.fs.rm(remote)
      copyMs.push(await timed(() => fsp.copyFile(src, dst)))
      writeMs.push(await sandboxWrite(sb, remote, bytes))
      readMs.push(await sandboxRead(sb, remote, bytes))
    }
    await fsp.rm(dst, { force: true })
    await fsp.rm(src, { force: true })
    await sb.fs.rm(remote)
    const copy = mbps(bytes, median(copyMs))
    const write = mbps(bytes, median(writeMs))
    const read = mbps(bytes, median(readMs))
    row(`${mibs} MiB (median of ${rounds}): fs.copyFile on host`, `${copy.toFixed(0)} MB/s  (${ms(median(copyMs))})`)
    row(
      `${mibs} MiB: sb.fs.writeFile(stream)`,
      `${write.toFixed(0)} MB/s  (${ms(median(writeMs))})  = ${percent(write, copy)} of copyFile`,
    )
    row(
      `${mibs} MiB: sb.fs.createReadStream`,
      `${read.toFixed(0)} MB/s  (${ms(median(readMs))})  = ${percent(read, copy)} of copyFile`,
    )
    target(
      `${mibs} MiB write ≥ ${TARGET_SHARE * 100} % of copyFile`,
      percent(write, copy),
      write >= TARGET_SHARE * copy,
    )
    target(`${mibs} MiB read ≥ ${TARGET_SHARE * 100} % of copyFile`, percent(read, copy), read >= TARGET_SHARE * copy)
  }

  heading(`small files: ${SMALL} × 4 KiB`)
  const small = crypto.randomBytes(4096)
  await sb.fs.mkdir('/workspace/small', { parents: true })
  const smallHost = path.join(hostDir, 'small')
  fs.mkdirSync(smallHost)
  const sbWriteMs = await timed(async () => {
    for (let i = 0; i < SMALL; i++) await sb.fs.writeFile(`/workspace/small/${i}`, small)
  })
  const sbReadMs = await timed(async () => {
    for (let i = 0; i < SMALL; i++) await sb.fs.readFile(`/workspace/small/${i}`)
  })
  const sbParallelMs = await timed(() => inParallel(SMALL, 16, (i) => sb.fs.writeFile(`/workspace/small/p${i}`, small)))
  const hostWriteMs = await timed(async () => {
    for (let i = 0; i < SMALL; i++) await fsp.writeFile(path.join(smallHost, String(i)), small)
  })
  const hostReadMs = await timed(async () => {
    for (let i = 0; i < SMALL; i++) await fsp.readFile(path.join(smallHost, String(i)))
  })
  const opsPerS = (elapsedMs: number) =>
    `${((SMALL / elapsedMs) * 1000).toFixed(0)} ops/s  (${ms(elapsedMs / SMALL)} each)`
  row('sb.fs.writeFile, one at a time', opsPerS(sbWriteMs))
  row('sb.fs.writeFile, 16 in flight', opsPerS(sbParallelMs))
  row('sb.fs.readFile, one at a time', opsPerS(sbReadMs))
  row('baseline: fsp.writeFile on host, one at a time', opsPerS(hostWriteMs))
  row('baseline: fsp.readFile on host, one at a time', opsPerS(hostReadMs))
  row(
    'sandbox / host (one at a time)',
    `write ${percent(hostWriteMs, sbWriteMs)}  read ${percent(hostReadMs, sbReadMs)}`,
  )
  note('sandbox writes are atomic (temp file, fsync, rename); the host baseline is a plain write')
  await sb.fs.rm('/workspace/small', { recursive: true })

  if (FILES > 0) {
    heading(`grep over ${FILES} files: sb.fs.grep beside grep -r run by exec (busybox grep)`)
    const made = await sb.exec('sh', ['-c', makeTreeScript(FILES)], { timeoutMs: 300_000 })
    if (made.exitCode !== 0) throw new Error(`making the grep tree failed: ${made.stderr}`)
    for (const [label, pattern] of [
      ['pattern matching 1 file in 50', 'needle-[0-9]+'],
      ['pattern matching nothing', 'absent-[0-9]+'],
    ] as const) {
      await sb.fs.grep('/workspace/tree', pattern, { recursive: true })
      await sb.exec('grep', ['-rnE', pattern, '/workspace/tree'])
      const apiMs: number[] = []
      const execMs: number[] = []
      let apiMatches = 0
      let execMatches = 0
      for (let i = 0; i < 5; i++) {
        apiMs.push(
          await timed(
            async () =>
              (apiMatches = (await sb.fs.grep('/workspace/tree', pattern, { recursive: true })).matches.length),
          ),
        )
        execMs.push(
          await timed(
            async () =>
              (execMatches = countLines((await sb.exec('grep', ['-rnE', pattern, '/workspace/tree'])).stdout)),
          ),
        )
      }
      if (apiMatches !== execMatches) note(`match counts differ: sb.fs.grep ${apiMatches}, grep -r ${execMatches}`)
      row(`${label}: sb.fs.grep`, `${ms(median(apiMs))}  (median of 5, ${apiMatches} matches)`)
      row(`${label}: exec grep -rnE`, `${ms(median(execMs))}  (median of 5, ${execMatches} matches)`)
      row(`${label}: sb.fs.grep / exec grep`, ratio(median(apiMs), median(execMs)))
    }
  }
  await sb.stop()
} finally {
  await dispose()
  fs.rmSync(hostDir, { recursive: true, force: true })
}

/**
 * Where the host's copies go: /dev/shm (tmpfs, like the sandbox's writable layer, and no
 * writeback competing with the sandbox for the CPU) when it has room, else the temp dir.
 */
function hostScratch(needBytes: number): string {
  try {
    const st = fs.statfsSync('/dev/shm')
    if (st.type === TMPFS_MAGIC && st.bavail * st.bsize > needBytes + 256 * 1024 * 1024) return '/dev/shm'
  } catch {}
  return os.tmpdir()
}

function countLines(text: string): number {
  return text.length === 0 ? 0 : text.trimEnd().split('\n').length
}

/** Runs fn(0..n-1) with at most `width` calls in flight. */
async function inParallel(n: number, width: number, fn: (i: number) => Promise<unknown>): Promise<void> {
  let next = 0
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < n) await fn(next++)
    }),
  )
}

/** Shell that writes `files` files of ~20 lines in directories of 100; every 50th holds a needle. */
function makeTreeScript(files: number): string {
  return `
set -e
lines=""
for l in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
  lines="$lines line $l: the quick brown fox jumps over the lazy dog, 0123456789 abcdefghij
"
done
i=0
while [ $i -lt ${files} ]; do
  d=/workspace/tree/d$((i / 100))
  [ -d $d ] || mkdir -p $d
  if [ $((i % 50)) -eq 0 ]; then
    printf '%sneedle-%d here\\n' "$lines" $i > $d/f$i.txt
  else
    printf '%s' "$lines" > $d/f$i.txt
  fi
  i=$((i + 1))
done
`
}
