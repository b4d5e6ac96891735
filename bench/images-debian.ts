/**
 * Benchmark (issue 41): presets and recipes that are real Debian systems.
 *
 * - The scientific-Python recipe `{ base: 'python', packages: [numpy, pandas, matplotlib] }`
 *   built cold into a fresh cache: its size (target ≤ 450 MB) and its build time beside
 *   mmdebstrap of the same packages from the same archive into a plain directory (variant apt:
 *   maintainer scripts run, no Recommends) in the same run (target ≤ 1.5×). As root only (the
 *   baseline runs mmdebstrap in root mode).
 * - The same recipe on the python preset already built (a layer over its tree, lib/images/layer-build.ts)
 *   beside fetching and unpacking only the packages the layer adds: apt-get update and
 *   download of exactly those versions from the same archive into a scratch directory, then
 *   `dpkg-deb -x` of each (target ≤ 1.2×); and the disk the layer takes beside the preset's.
 * - create → ready from the python preset beside base, interleaved in the same run (target ≤ 1.1×).
 *
 * Builds are minutes long and the machine's load moves them by tens of percent: `--rounds 2`
 * runs baseline, recipe, recipe, baseline (each round reverses the order) and compares sums.
 *
 * Usage: node --import tsx bench/images-debian.ts [--creates 30] [--rounds 1] [--no-build]
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { parseArgs } from 'node:util'
import { currentArchiveState, readAptSources } from '../lib/images/debian-archive.js'
import { DEFAULT_SUITE, ImageStore, type ImageManifest } from '../lib/images/index.js'
import { customRecipe } from '../lib/images/recipe.js'
import { benchRuntime } from './support/host.js'
import { heading, note, row, target } from './support/report.js'
import { mib, ms, ratio, summarize } from './support/stats.js'

const { values } = parseArgs({
  options: {
    creates: { type: 'string', default: '30' },
    rounds: { type: 'string', default: '1' },
    'no-build': { type: 'boolean', default: false },
    /** The layer section's recipe packages, comma-separated (default: the scientific recipe's). */
    'layer-packages': { type: 'string' },
  },
})
const CREATES = Number(values.creates)
const ROUNDS = Number(values.rounds)
const TARGET_SIZE_BYTES = 450 * 1024 * 1024
const TARGET_BUILD_VS_MMDEBSTRAP = 1.5
const TARGET_PRESET_CREATE_VS_BASE = 1.1
const TARGET_LAYER_VS_FETCH_UNPACK = 1.2
const DEBIAN_KEYRING = '/usr/share/keyrings/debian-archive-keyring.gpg'
const SCIENTIFIC = { base: 'python', packages: ['python3-numpy', 'python3-pandas', 'python3-matplotlib'] }
const LAYER_RECIPE =
  values['layer-packages'] === undefined
    ? SCIENTIFIC
    : { base: 'python', packages: values['layer-packages'].split(',') }

/** Wall-clock ms of a command that must succeed (its output kept for the error). */
function timed(file: string, args: string[], cwd?: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now()
    const child = spawn(file, args, { cwd, stdio: ['ignore', 'ignore', 'pipe'] })
    let err = ''
    child.stderr.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-4000)))
    child.once('error', reject)
    child.once('exit', (code) =>
      code === 0 ? resolve(performance.now() - t0) : reject(new Error(`${file} exited ${code}:\n${err}`)),
    )
  })
}

/** Bytes of regular files under dir (what an image's sizeBytes counts). */
function regularBytes(dir: string): number {
  let total = 0
  for (const entry of fs.readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) total += fs.lstatSync(path.join(entry.parentPath, entry.name)).size
  }
  return total
}

async function scientificBuild(): Promise<void> {
  heading('the scientific-Python recipe, built cold, beside mmdebstrap of the same packages (same run)')
  if (process.getuid?.() !== 0) {
    note('skipped: the baseline runs mmdebstrap in root mode (run as root)')
    return
  }
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-bench-debian-'))
  try {
    // The same packages and dists the recipe's build uses, found as the store finds them.
    const recipe = await customRecipe(SCIENTIFIC, DEFAULT_SUITE)
    const archive = await currentArchiveState(DEFAULT_SUITE, await readAptSources(), [])
    const built: ImageManifest[] = []
    const recipeBuild = async (): Promise<number> => {
      const cacheDir = path.join(work, 'cache')
      const t0 = performance.now()
      built.push((await new ImageStore({ cacheDir }).register('scientific', SCIENTIFIC)).manifest)
      const elapsed = performance.now() - t0
      fs.rmSync(cacheDir, { recursive: true, force: true })
      return elapsed
    }
    const plain = path.join(work, 'plain')
    let plainBytes = 0
    const baseline = async (): Promise<number> => {
      const elapsed = await timed('mmdebstrap', [
        '--quiet',
        '--variant=apt',
        '--mode=root',
        '--aptopt=APT::Install-Recommends "false"',
        `--include=${recipe.packages.join(',')}`,
        recipe.suite,
        plain,
        ...(archive?.sources ?? []).map((s) => `deb ${s.uri} ${s.dist} main`),
      ])
      plainBytes = regularBytes(plain)
      fs.rmSync(plain, { recursive: true, force: true })
      return elapsed
    }
    let buildMs = 0
    let baselineMs = 0
    for (let round = 0; round < ROUNDS; round++) {
      const order = round % 2 === 0 ? [baseline, recipeBuild] : [recipeBuild, baseline]
      for (const step of order) {
        const elapsed = await step()
        if (step === baseline) baselineMs += elapsed
        else buildMs += elapsed
        row(step === baseline ? `round ${round + 1}: mmdebstrap` : `round ${round + 1}: recipe build`, ms(elapsed))
      }
    }
    row('recipe builds (cold: archive, maintainer scripts, post-steps)', ms(buildMs))
    row('baseline: mmdebstrap --variant=apt of the same packages', ms(baselineMs))
    row('build / baseline', ratio(buildMs, baselineMs))
    const size = built.at(-1)?.sizeBytes ?? 0
    row('image size (regular files)', mib(size))
    row('baseline tree size (regular files)', mib(plainBytes))
    row('packages', String(built.at(-1)?.packages.length ?? 0))
    target(`size ≤ ${mib(TARGET_SIZE_BYTES)}`, mib(size), size <= TARGET_SIZE_BYTES)
    target(
      `build ≤ ${TARGET_BUILD_VS_MMDEBSTRAP}× mmdebstrap`,
      ratio(buildMs, baselineMs),
      buildMs <= TARGET_BUILD_VS_MMDEBSTRAP * baselineMs,
    )
  } finally {
    fs.rmSync(work, { recursive: true, force: true })
  }
}

/** Blocks in use under dir, each inode once (what `du` counts): what a tree takes on disk. */
function diskBytes(dirs: string[]): number {
  const seen = new Set<number>()
  let total = 0
  for (const dir of dirs)
    for (const entry of fs.readdirSync(dir, { withFileTypes: true, recursive: true })) {
      const st = fs.lstatSync(path.join(entry.parentPath, entry.name))
      if (seen.has(st.ino)) continue
      seen.add(st.ino)
      total += st.blocks * 512
    }
  return total
}

/** apt-get update, then download of exactly `packages` (name=version), into a scratch apt root, then dpkg-deb -x of each. */
async function fetchAndUnpack(work: string, sources: ImageManifest['archive'], packages: string[]): Promise<number> {
  const root = path.join(work, 'apt-root')
  const debs = path.join(work, 'debs')
  const tree = path.join(work, 'unpacked')
  for (const d of ['etc/apt', 'var/lib/apt/lists/partial', 'var/cache/apt/archives/partial', 'var/lib/dpkg'])
    fs.mkdirSync(path.join(root, d), { recursive: true })
  fs.mkdirSync(debs)
  fs.mkdirSync(tree)
  fs.writeFileSync(path.join(root, 'var/lib/dpkg/status'), '')
  const list = (sources?.sources ?? []).map((s) => `deb [signed-by=${DEBIAN_KEYRING}] ${s.uri} ${s.dist} main`)
  fs.writeFileSync(path.join(root, 'etc/apt/sources.list'), `${list.join('\n')}\n`)
  const apt = [
    `-oDir=${root}`,
    '-oDir::Etc::SourceParts=/nonexistent',
    `-oDir::State::Status=${root}/var/lib/dpkg/status`,
    '-qq',
  ]
  const t0 = performance.now()
  await timed('apt-get', [...apt, 'update'])
  await timed('apt-get', [...apt, 'download', ...packages], debs)
  for (const deb of fs.readdirSync(debs)) await timed('dpkg-deb', ['-x', path.join(debs, deb), tree])
  const elapsed = performance.now() - t0
  for (const d of [root, debs, tree]) fs.rmSync(d, { recursive: true, force: true })
  return elapsed
}

async function layerBuild(): Promise<void> {
  heading(
    `the recipe ${JSON.stringify(LAYER_RECIPE)} on the built python preset (a layer), beside fetching and unpacking its own packages`,
  )
  if (process.getuid?.() !== 0) {
    note('skipped: recipes are layers as root only')
    return
  }
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-bench-layer-'))
  const store = new ImageStore({})
  try {
    const preset = await store.build('python')
    let layerMs = 0
    let fetchMs = 0
    let layer: ImageManifest | null = null
    let layerRootfs = ''
    for (let round = 0; round < ROUNDS; round++) {
      await store.remove('layer-bench').catch(() => false)
      const t0 = performance.now()
      const built = await store.register('layer-bench', LAYER_RECIPE)
      const elapsed = performance.now() - t0
      layerMs += elapsed
      layer = built.manifest
      layerRootfs = built.rootfs
      row(`round ${round + 1}: recipe build over the preset`, ms(elapsed))
      const own = new Set(preset.manifest.packages.map((p) => `${p.name}=${p.version}`))
      const added = layer.packages.map((p) => `${p.name}=${p.version}`).filter((p) => !own.has(p))
      const fetched = await fetchAndUnpack(work, preset.manifest.archive, added)
      fetchMs += fetched
      row(`round ${round + 1}: fetch + unpack of its ${added.length} packages`, ms(fetched))
    }
    const presetDisk = diskBytes([preset.rootfs])
    const bothDisk = diskBytes([preset.rootfs, layerRootfs])
    row('recipe builds over the preset', ms(layerMs))
    row('baseline: apt-get update + download + dpkg-deb -x of the same packages', ms(fetchMs))
    row('layer build / baseline', ratio(layerMs, fetchMs))
    row('disk: the preset alone', mib(presetDisk))
    row(
      'disk: the preset and the recipe',
      `${mib(bothDisk)} (+${mib(bothDisk - presetDisk)}; the recipe's tree alone ${mib(layer?.sizeBytes ?? 0)})`,
    )
    target(
      `layer build ≤ ${TARGET_LAYER_VS_FETCH_UNPACK}× fetch + unpack`,
      ratio(layerMs, fetchMs),
      layerMs <= TARGET_LAYER_VS_FETCH_UNPACK * fetchMs,
    )
  } finally {
    await store.remove('layer-bench').catch(() => false)
    fs.rmSync(work, { recursive: true, force: true })
  }
}

async function presetCreate(): Promise<void> {
  heading(`create → ready: the python preset beside base (${CREATES} each, interleaved)`)
  const { rt, dispose } = benchRuntime()
  try {
    // Built (or found) first, untimed; one create each warms the page cache and the id shift.
    for (const image of ['base', 'python']) await (await rt.create({ image, driver: 'namespace' })).stop()
    const times: Record<string, number[]> = { base: [], python: [] }
    for (let i = 0; i < CREATES; i++) {
      for (const image of ['base', 'python']) {
        const t0 = performance.now()
        const sb = await rt.create({ image, driver: 'namespace' })
        times[image].push(performance.now() - t0)
        await sb.stop()
      }
    }
    const base = summarize(times.base)
    const python = summarize(times.python)
    row('create → ready, python', `p50 ${ms(python.p50)}  p95 ${ms(python.p95)}`)
    row('baseline: create → ready, base', `p50 ${ms(base.p50)}  p95 ${ms(base.p95)}`)
    target(
      `python ≤ ${TARGET_PRESET_CREATE_VS_BASE}× base (p50)`,
      ratio(python.p50, base.p50),
      python.p50 <= TARGET_PRESET_CREATE_VS_BASE * base.p50,
    )
  } finally {
    await dispose()
  }
}

if (!values['no-build']) await scientificBuild()
await layerBuild()
await presetCreate()
