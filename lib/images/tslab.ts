/**
 * tslab, the Jupyter kernel for JavaScript and TypeScript that the code-interpreter preset
 * carries, from the npm registry npm is configured with on this host. Its whole dependency tree
 * is pinned by tslab-lock.json (exact versions with their sha512 integrity, no registry host):
 * the image's own npm installs it with `npm ci`, which refuses a tarball whose integrity differs,
 * and the kernel needs no network afterwards. The tree is laid out as `npm install -g tslab`
 * lays it out (every dependency beneath tslab, where it looks for @types/node). No install
 * script runs: zeromq's tarball carries its prebuilt addons.
 */
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import fs from 'node:fs/promises'
import path from 'node:path'
import { packageRoot } from '../paths.js'
import { resolveInRoot } from './rootfs.js'
import { run } from './run.js'
import { errors } from '../protocol/errors.gen.js'

export const TSLAB_VERSION = '1.0.22'

const LOCK_FILE = path.join(packageRoot, 'lib', 'images', 'tslab-lock.json')

/** What an image id takes from tslab: its version and the digest of the pinned tree. */
export interface TslabRecipe {
  version: string
  lockDigest: string
}

let lock: Buffer | null = null
function lockFile(): Buffer {
  lock ??= readFileSync(LOCK_FILE)
  return lock
}

export function tslabRecipe(): TslabRecipe {
  return { version: TSLAB_VERSION, lockDigest: createHash('sha256').update(lockFile()).digest('hex') }
}

/** The kernelspecs `tslab install --prefix=/usr/local` would write, for Jupyter's own tools. */
function kernelSpec(js: boolean): string {
  const argv = ['tslab', 'kernel', '--config-path', '{connection_file}', ...(js ? ['--js'] : [])]
  const spec = { argv, display_name: js ? 'JavaScript' : 'TypeScript', language: js ? 'javascript' : 'typescript' }
  return `${JSON.stringify(spec, null, 2)}\n`
}

/** Installs the pinned tslab into the image with its npm (installNode ran); S102 naming tslab when it fails. */
export async function installTslab(root: string, tmpDir: string, registry: string): Promise<void> {
  // The build directory becomes the image's: the stage and npm's cache go, whatever happens.
  const stage = path.join(tmpDir, 'tslab')
  try {
    await installFromStage(root, stage, registry)
  } finally {
    await fs.rm(stage, { recursive: true, force: true })
  }
}

async function installFromStage(root: string, stage: string, registry: string): Promise<void> {
  const subject = `the npm package tslab@${TSLAB_VERSION}`
  await fs.mkdir(path.join(stage, 'tree'), { recursive: true })
  const manifest = { name: 'krunbox-tslab', private: true, dependencies: { tslab: TSLAB_VERSION } }
  await fs.writeFile(path.join(stage, 'tree', 'package.json'), JSON.stringify(manifest))
  await fs.writeFile(path.join(stage, 'tree', 'package-lock.json'), lockFile())
  const node = await resolveInRoot(root, '/usr/local/bin/node')
  const npm = await resolveInRoot(root, '/usr/local/lib/node_modules/npm/bin/npm-cli.js')
  const installed = await run(
    node,
    [
      npm,
      'ci',
      '--ignore-scripts',
      '--no-audit',
      '--no-fund',
      '--update-notifier=false',
      `--registry=${registry}`,
      `--cache=${path.join(stage, 'npm-cache')}`,
    ],
    { cwd: path.join(stage, 'tree'), dieWithParent: true },
  )
  if (installed.code !== 0)
    throw errors.imageBuildFailed({
      subject,
      problem: `could not be installed from ${registry} (npm ci exit ${installed.code ?? installed.signal}):\n${installed.tail}`,
    })
  const modules = await resolveInRoot(root, '/usr/local/lib/node_modules')
  await fs.rename(path.join(stage, 'tree', 'node_modules', 'tslab'), path.join(modules, 'tslab'))
  // Readable and runnable by every context's uid, whatever the build's umask was.
  const chmod = await run('chmod', ['-R', 'u+rwX,go+rX,go-w', path.join(modules, 'tslab')])
  if (chmod.code !== 0)
    throw errors.imageBuildFailed({ subject, problem: `could not be made readable:\n${chmod.tail}` })
  const bin = await resolveInRoot(root, '/usr/local/bin/tslab', false)
  await fs.rm(bin, { force: true })
  await fs.symlink('../lib/node_modules/tslab/bin/tslab', bin)
  for (const [name, js] of [
    ['jslab', true],
    ['tslab', false],
  ] as const) {
    const dir = await resolveInRoot(root, `/usr/local/share/jupyter/kernels/${name}`)
    await fs.mkdir(dir, { recursive: true })
    await fs.writeFile(path.join(dir, 'kernel.json'), kernelSpec(js), { mode: 0o644 })
  }
}
