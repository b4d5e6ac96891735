/**
 * The package as a user gets it. `npm pack` (prepack builds what ships), the contents
 * against an allowlist, then the tarball installed into a fresh project with --ignore-scripts and
 * no compiler on PATH, used from ESM, from CommonJS (require(esm) off, as on the oldest Node 20),
 * from strict TypeScript, and through `npx krunbox`. The image cache is the shared one.
 * (Issue 16.)
 */
import { execFile, execFileSync } from 'node:child_process'
import fs from 'node:fs'
import { createRequire } from 'node:module'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { findExecutable } from '../../lib/paths.js'

const run = promisify(execFile)
const repoRoot = path.resolve(import.meta.dirname, '../..')
const work = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-package-'))
// The sandbox's ids (not this user on a root host) look up what the package ships: searchable, like a real install.
fs.chmodSync(work, 0o755)
const project = path.join(work, 'app')
const bin = path.join(work, 'bin')
let files: string[] = []

/** Exactly what may ship: the build, the prebuilt parts, the sources a fallback compile needs, docs. */
const ALLOWED = [
  /^package\.json$/,
  /^README\.md$/,
  /^LICENSE$/,
  /^CHANGELOG\.md$/,
  /^(PROTOCOL|ERRORS)\.md$/,
  /^docs\/[a-z0-9-]+\.md$/,
  /^dist\/(index\.(js|cjs|d\.ts|d\.cts)|cli\.js)$/,
  /^prebuilds\/linux-(x64|arm64)\/(krunbox\.glibc\.node|krun-shim|krunbox-reaper|krunbox-reset)$/,
  /^agent\/dist\/linux-(amd64|arm64)\/krunbox-agent$/,
  /^binding\.gyp$/,
  /^scripts\/install\.cjs$/,
  /^native\/(src\/(addon|shim|reaper|reset|common)|include)\/[a-z_]+\.(c|cc|h)$/,
  // What runCode writes into a sandbox, and the code-interpreter image's pinned tslab tree.
  /^lib\/code\/bridge\/code_bridge\.py$/,
  /^lib\/images\/tslab-lock\.json$/,
]
const REQUIRED = [
  'LICENSE',
  'lib/code/bridge/code_bridge.py',
  'lib/images/tslab-lock.json',
  'README.md',
  'dist/index.js',
  'dist/index.cjs',
  'dist/index.d.ts',
  'dist/index.d.cts',
  'dist/cli.js',
  // Both architectures: the set-up installs Debian's cross compiler for the other one.
  'prebuilds/linux-x64/krunbox.glibc.node',
  'prebuilds/linux-x64/krun-shim',
  'prebuilds/linux-x64/krunbox-reaper',
  'prebuilds/linux-x64/krunbox-reset',
  'prebuilds/linux-arm64/krunbox.glibc.node',
  'prebuilds/linux-arm64/krun-shim',
  'prebuilds/linux-arm64/krunbox-reaper',
  'prebuilds/linux-arm64/krunbox-reset',
  'agent/dist/linux-amd64/krunbox-agent',
  'agent/dist/linux-arm64/krunbox-agent',
]
const COMPILERS = ['cc', 'gcc', 'g++', 'c++', 'clang', 'make', 'python3', 'node-gyp']

/** A PATH with node, npm, npx and sh only: nothing that could compile the addon. bwrap comes by KRUNBOX_BWRAP. */
function minimalPath(): string {
  fs.mkdirSync(bin)
  const npmCli = fs.realpathSync(findExecutable('npm')!)
  const link = (name: string, target: string) => fs.symlinkSync(target, path.join(bin, name))
  link('node', process.execPath)
  link('npm', npmCli)
  link('npx', path.join(path.dirname(npmCli), 'npx-cli.js'))
  link('sh', '/bin/sh')
  return bin
}

const env = (): NodeJS.ProcessEnv => ({
  HOME: process.env.HOME,
  PATH: bin,
  KRUNBOX_BWRAP: findExecutable('bwrap')!,
  XDG_CACHE_HOME: process.env.XDG_CACHE_HOME,
  XDG_STATE_HOME: path.join(work, 'state'),
  XDG_CONFIG_HOME: path.join(work, 'config'),
  npm_config_cache: process.env.npm_config_cache,
})

beforeAll(async () => {
  // Asynchronous: prepack builds for minutes, and a blocked worker loses its link to vitest.
  const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', work], {
    cwd: repoRoot,
    encoding: 'utf8',
    timeout: 540_000,
    maxBuffer: 64 * 1024 * 1024,
  })
  const packed = JSON.parse(stdout)[0] as {
    filename: string
    size: number
    unpackedSize: number
    entryCount: number
    files: { path: string }[]
  }
  files = packed.files.map((f) => f.path).sort()
  console.log(
    `krunbox package: ${packed.entryCount} files, ${(packed.size / 1048576).toFixed(2)} MiB packed, ${(packed.unpackedSize / 1048576).toFixed(2)} MiB unpacked`,
  )

  const searchPath = minimalPath()
  fs.mkdirSync(project)
  fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'app', private: true, type: 'module' }))
  await run(
    'npm',
    [
      'install',
      '--ignore-scripts',
      '--prefer-offline',
      '--no-audit',
      '--no-fund',
      '--loglevel=error',
      path.join(work, packed.filename),
    ],
    {
      cwd: project,
      env: { ...env(), PATH: searchPath },
      timeout: 300_000,
    },
  )
  const installed = installedPackages(path.join(project, 'node_modules'))
  console.log(
    `installed app: ${installed.length} packages (krunbox and its dependencies), ${(duBytes(path.join(project, 'node_modules')) / 1048576).toFixed(1)} MiB on disk`,
  )
}, 600_000)

/** Every package directory under node_modules (scoped ones included), by name. */
function installedPackages(dir: string): string[] {
  const names: string[] = []
  for (const name of fs.readdirSync(dir)) {
    if (name.startsWith('.')) continue
    if (name.startsWith('@')) for (const sub of fs.readdirSync(path.join(dir, name))) names.push(`${name}/${sub}`)
    else names.push(name)
  }
  return names
}

function duBytes(p: string): number {
  const st = fs.lstatSync(p)
  if (!st.isDirectory()) return st.blocks * 512
  return fs.readdirSync(p).reduce((sum, name) => sum + duBytes(path.join(p, name)), st.blocks * 512)
}

afterAll(() => {
  fs.rmSync(work, { recursive: true, force: true })
})

describe('the packed package', () => {
  // The walk of every shipped Markdown link (and its anchors): test/package/links.test.ts.

  it('tells npm its platform and keywords, and installs no unused dependency (p-queue, the Bare shims)', () => {
    const manifest = JSON.parse(fs.readFileSync(path.join(project, 'node_modules', 'krunbox', 'package.json'), 'utf8'))
    expect(manifest.os).toEqual(['linux'])
    expect(manifest.cpu).toEqual(['x64', 'arm64'])
    // glibc takes the prebuilds, musl (Alpine) compiles from the shipped sources (docs/install.md):
    // both, so npm's own platform check lets both install and refuses any other OS.
    expect(manifest.libc).toEqual(['glibc', 'musl'])
    const npmRoot = execFileSync('npm', ['root', '-g'], { encoding: 'utf8' }).trim()
    const checks = createRequire(import.meta.url)(path.join(npmRoot, 'npm', 'node_modules', 'npm-install-checks'))
    const verdict = (environment: Record<string, string>) => {
      try {
        checks.checkPlatform(manifest, false, environment)
        return 'ok'
      } catch (err) {
        return (err as { code: string }).code
      }
    }
    expect(verdict({ os: 'linux', cpu: 'x64', libc: 'glibc' })).toBe('ok')
    expect(verdict({ os: 'linux', cpu: 'arm64', libc: 'musl' })).toBe('ok')
    expect(verdict({ os: 'darwin', cpu: 'arm64' })).toBe('EBADPLATFORM')
    expect(verdict({ os: 'linux', cpu: 'ia32', libc: 'glibc' })).toBe('EBADPLATFORM')
    expect(manifest.keywords).toContain('sandbox')
    expect(Object.keys(manifest.dependencies)).not.toContain('p-queue')
    const installed = installedPackages(path.join(project, 'node_modules'))
    expect(installed.filter((n) => n === 'p-queue' || /^bare-(fs|os|path|url|stream|buffer)$/.test(n))).toEqual([])
  })

  it('installs exactly the dependency tree package.json names, and of the Bare shims only bare-events (streamx)', () => {
    const modules = path.join(project, 'node_modules')
    const manifest = (name: string) => JSON.parse(fs.readFileSync(path.join(modules, name, 'package.json'), 'utf8'))
    const own = manifest('krunbox')
    expect(Object.keys(own.dependencies).sort()).toEqual(
      Object.keys(JSON.parse(fs.readFileSync(path.join(repoRoot, 'package.json'), 'utf8')).dependencies).sort(),
    )
    // What the dependencies pull in, followed through the installed manifests (all hoisted: one flat node_modules).
    const wanted = new Set<string>()
    const visit = (name: string) => {
      if (wanted.has(name) || !fs.existsSync(path.join(modules, name))) return
      wanted.add(name)
      for (const dep of Object.keys(manifest(name).dependencies ?? {})) visit(dep)
    }
    visit('krunbox')
    const installed = installedPackages(modules)
    expect(installed.sort()).toEqual([...wanted].sort())
    const bare = installed.filter((n) => n.startsWith('bare-'))
    expect(bare).toEqual(['bare-events'])
    const bareBytes = bare.reduce((sum, n) => sum + duBytes(path.join(modules, n)), 0)
    expect(bareBytes).toBeLessThan(256 * 1024)
    console.log(
      `dependencies: ${Object.keys(own.dependencies).length} direct, ${installed.length - 1} in all; ${(duBytes(modules) / 1048576).toFixed(1)} MiB installed, of it Bare shims ${(bareBytes / 1024).toFixed(0)} KiB (${bare.join(', ')})`,
    )
  })

  it('holds only allowlisted files, and everything a user needs', () => {
    const unexpected = files.filter((f) => !ALLOWED.some((re) => re.test(f)))
    expect(unexpected).toEqual([])
    for (const f of REQUIRED) expect(files).toContain(f)
    expect(files.filter((f) => /(^|\/)test|_test\.go$|\.test\.|\.go$/.test(f))).toEqual([])
  })

  it('ships each prebuilt binary for the machine its directory names (ELF e_machine)', () => {
    const machine = (file: string) => fs.readFileSync(path.join(project, 'node_modules/krunbox', file)).readUInt16LE(18)
    const EM = { x64: 62, amd64: 62, arm64: 183 } as const
    const binaries = files.filter((f) => /^(prebuilds\/linux-(x64|arm64)\/|agent\/dist\/linux-(amd64|arm64)\/)/.test(f))
    // Per architecture: the addon, krun-shim, krunbox-reaper, krunbox-reset and the agent.
    expect(binaries).toHaveLength(10)
    for (const f of binaries) {
      const arch = /linux-(x64|amd64|arm64)\//.exec(f)![1] as keyof typeof EM
      expect([f, machine(f)]).toEqual([f, EM[arch]])
    }
  })

  it('ships krunbox-reaper and krunbox-reset linked statically (no program interpreter: no loader runs at each of their starts)', () => {
    for (const [arch, exe] of ['x64', 'arm64'].flatMap((a) => [
      [a, 'krunbox-reaper'],
      [a, 'krunbox-reset'],
    ])) {
      const elf = fs.readFileSync(path.join(project, 'node_modules/krunbox/prebuilds', `linux-${arch}`, exe))
      const phoff = Number(elf.readBigUInt64LE(0x20))
      const types = Array.from({ length: elf.readUInt16LE(0x38) }, (_, i) =>
        elf.readUInt32LE(phoff + i * elf.readUInt16LE(0x36)),
      )
      const PT_LOAD = 1
      const PT_INTERP = 3
      expect(types).toContain(PT_LOAD)
      expect([arch, exe, types.includes(PT_INTERP)]).toEqual([arch, exe, false])
    }
  })
})

describe('installed with --ignore-scripts and no compiler on PATH', () => {
  it('the PATH really has no compiler, and nothing was compiled at install', () => {
    for (const tool of COMPILERS) expect(findExecutable(tool, bin), tool).toBeNull()
    expect(fs.existsSync(path.join(project, 'node_modules/krunbox/build'))).toBe(false)
  })

  it('with no prebuild that fits and no compiler or Python, the install script says so in a krunbox line before node-gyp speaks', async () => {
    const bare = path.join(work, 'no-prebuild')
    fs.mkdirSync(bare)
    fs.cpSync(path.join(project, 'node_modules'), path.join(bare, 'node_modules'), {
      recursive: true,
      verbatimSymlinks: true,
    })
    fs.writeFileSync(
      path.join(bare, 'package.json'),
      JSON.stringify({ name: 'bare', private: true, dependencies: { krunbox: '*' } }),
    )
    fs.rmSync(path.join(bare, 'node_modules/krunbox/prebuilds'), { recursive: true })
    // stdout and stderr in one stream, in the order they were written.
    const r = await run('sh', ['-c', 'npm rebuild krunbox --foreground-scripts --loglevel=info 2>&1; echo "exit=$?"'], {
      cwd: bare,
      env: env(),
      timeout: 120_000,
      encoding: 'utf8',
    })
    const out = r.stdout
    const line = out.indexOf(
      `krunbox: no prebuilt addon for linux-${process.arch}/node-abi ${process.versions.modules} (glibc); building from source needs python3, make and a C++ compiler (apt-get install python3 make g++`,
    )
    expect(line, out).toBeGreaterThanOrEqual(0)
    const gyp = out.search(/gyp (info|ERR!|WARN)/)
    expect(gyp, out).toBeGreaterThan(line)
    expect(out).toMatch(/exit=[1-9]/)
  }, 180_000)

  it('ESM and CommonJS (require(esm) off) give the same API, run a sandbox, and queue: true works', async () => {
    const script = (load: string) => `${load}
const rt = new Runtime({ queue: true, maxConcurrentSandboxes: 1 })
;(async () => {
  const a = await rt.create({ image: 'base', driver: 'namespace' })
  const queued = rt.create({ image: 'base', driver: 'namespace' })
  const r = await a.exec('echo', ['hi'])
  await a.stop()
  const b = await queued
  await b.stop()
  await rt.close()
  process.stdout.write(JSON.stringify({ out: r.stdout, api: Object.keys(api).sort() }))
})()
`
    fs.writeFileSync(path.join(project, 'esm.mjs'), script(`import * as api from 'krunbox'\nconst { Runtime } = api`))
    fs.writeFileSync(path.join(project, 'cjs.cjs'), script(`const api = require('krunbox')\nconst { Runtime } = api`))
    const esm = await run('node', ['esm.mjs'], { cwd: project, env: env(), timeout: 120_000 })
    const cjs = await run('node', ['--no-experimental-require-module', 'cjs.cjs'], {
      cwd: project,
      env: env(),
      timeout: 120_000,
    })
    const fromEsm = JSON.parse(esm.stdout)
    const fromCjs = JSON.parse(cjs.stdout)
    expect(fromEsm.out).toBe('hi\n')
    expect(fromCjs.out).toBe('hi\n')
    expect(fromCjs.api).toEqual(fromEsm.api.filter((k: string) => k !== 'default'))
    expect(fromEsm.api).toEqual(expect.arrayContaining(['Sandbox', 'Runtime', 'SandboxError', 'ImageStore']))
  }, 300_000)

  it('strict TypeScript compiles against the shipped types (ESM and CommonJS) and the result runs', async () => {
    fs.writeFileSync(
      path.join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          strict: true,
          module: 'nodenext',
          moduleResolution: 'nodenext',
          target: 'es2022',
          noEmitOnError: true,
          typeRoots: [path.join(repoRoot, 'node_modules/@types')],
          types: ['node'],
        },
        files: ['app.ts', 'app-cjs.cts'],
      }),
    )
    const body = `
const rt = new Runtime({ queue: true })
const options: CreateOptions = { image: 'base', driver: 'namespace', onProgress: (e: ProgressEvent) => void e.percent }
async function main(): Promise<void> {
  const sb = await rt.create(options)
  try {
    const r = await sb.exec('echo', ['typed'])
    const code: number | null = r.exitCode
    process.stdout.write(r.stdout + String(code))
  } catch (err) {
    if (err instanceof SandboxError) process.stderr.write(err.code)
    throw err
  } finally {
    await sb.stop()
    await rt.close()
  }
}
`
    fs.writeFileSync(
      path.join(project, 'app.ts'),
      `import { Runtime, SandboxError, type CreateOptions, type ProgressEvent } from 'krunbox'\n${body}\nawait main()\n`,
    )
    fs.writeFileSync(
      path.join(project, 'app-cjs.cts'),
      `import { Runtime, SandboxError, type CreateOptions, type ProgressEvent } from 'krunbox'\n${body}\nvoid main()\n`,
    )
    await run('node', [path.join(repoRoot, 'node_modules/typescript/bin/tsc'), '-p', '.'], {
      cwd: project,
      env: env(),
      timeout: 120_000,
    })
    const { stdout } = await run('node', ['app.js'], { cwd: project, env: env(), timeout: 120_000 })
    expect(stdout).toBe('typed\n0')
  }, 300_000)

  it('npx krunbox run base -- echo hi, and doctor says what is cached', async () => {
    const { stdout } = await run('npx', ['--no-install', 'krunbox', 'run', 'base', '--', 'echo', 'hi'], {
      cwd: project,
      env: env(),
      timeout: 120_000,
    })
    expect(stdout).toBe('hi\n')
    const doctor = await run('npx', ['--no-install', 'krunbox', 'doctor'], {
      cwd: project,
      env: env(),
      timeout: 60_000,
    })
    expect(doctor.stdout).toMatch(/image cache: .*\n {2}base +cached/)
  }, 300_000)
})
