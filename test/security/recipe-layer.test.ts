/**
 * A recipe on a preset is a layer over the preset's tree, and the image links every file the
 * layer did not touch to the preset's own (lib/images/layer-build.ts). A write through such a
 * link would change the preset and every other recipe on it, and the build binds the host's
 * /etc/hosts and /etc/resolv.conf in for apt. Attacked by a recipe whose maintainer script, run as
 * root in the build, appends to a preset file and writes both host files, and whose recipe file
 * replaces a preset file; then by root in a sandbox of the recipe writing preset files.
 * The preset's tree must still be the one its manifest records, and the host's files unchanged.
 * apt's downloads, which parse what a mirror sends, run as its _apt user, never as the host's
 * root: where _apt cannot write its download directories the build fails instead.
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs/promises'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { BuildResult } from '../../lib/images/index.js'
import { buildLayerOverPreset } from '../../lib/images/layer-build.js'
import type { Runtime } from '../../lib/runtime.js'
import { SHARED_CACHE, sharedStore, tempDir } from '../images/helpers.js'
import { testRuntime } from '../helpers/runtime.js'

const MARK = 'krunbox-layer-write'
const HOST_FILES = ['/etc/hosts', '/etc/resolv.conf']
const NAME = 'layer-attack'

let dir: string
let preset: BuildResult
let layer: BuildResult
let rt: Runtime
const hostBefore = new Map<string, string>()
const presetBefore = new Map<string, string>()

/** A package whose postinst writes where a layer must not reach. */
async function writingPackage(): Promise<string> {
  const root = path.join(dir, 'pkg')
  await fs.mkdir(path.join(root, 'DEBIAN'), { recursive: true })
  await fs.writeFile(
    path.join(root, 'DEBIAN/control'),
    'Package: krunbox-layer-writer\nVersion: 1.0\nArchitecture: all\nMaintainer: krunbox tests <tests@krunbox.invalid>\nDescription: writes through links and binds\n',
  )
  const writes = [
    `echo ${MARK} >> /etc/debian_version`,
    ...HOST_FILES.map((f) => `(echo ${MARK} > ${f}) 2>/dev/null || true`),
  ]
  await fs.writeFile(path.join(root, 'DEBIAN/postinst'), `#!/bin/sh\n${writes.join('\n')}\nexit 0\n`, { mode: 0o755 })
  const deb = path.join(dir, 'krunbox-layer-writer_1.0_all.deb')
  execFileSync('dpkg-deb', ['--root-owner-group', '--build', root, deb], { stdio: 'ignore' })
  return deb
}

beforeAll(async () => {
  dir = await tempDir('recipe-layer-attack')
  preset = await sharedStore().build('python')
  for (const f of HOST_FILES) hostBefore.set(f, await fs.readFile(f, 'utf8'))
  for (const f of ['etc/debian_version', 'etc/issue', 'etc/os-release'])
    presetBefore.set(f, await fs.readFile(path.join(preset.rootfs, f), 'utf8'))
  const file = path.join(dir, 'issue')
  await fs.writeFile(file, `${MARK}\n`)
  layer = await sharedStore().register(NAME, {
    base: 'python',
    debs: [await writingPackage()],
    files: [{ from: file, to: '/etc/issue' }],
  })
  rt = testRuntime({ cacheDir: SHARED_CACHE })
}, 600_000)

afterAll(async () => {
  await rt?.close()
  // Were a defence gone, the host's files would be put back.
  for (const [f, text] of hostBefore) if ((await fs.readFile(f, 'utf8')) !== text) await fs.writeFile(f, text)
  await sharedStore()
    .remove(NAME)
    .catch(() => false)
  await fs.rm(dir, { recursive: true, force: true })
})

async function expectPresetUntouched(): Promise<void> {
  for (const [f, text] of presetBefore) expect(await fs.readFile(path.join(preset.rootfs, f), 'utf8'), f).toBe(text)
  expect(await sharedStore().verify('python')).toBe(true)
}

describe('a recipe layer over a preset', () => {
  it('shares the preset files it did not touch (the same inodes)', async () => {
    const a = await fs.stat(path.join(preset.rootfs, 'etc/os-release'))
    const b = await fs.stat(path.join(layer.rootfs, 'etc/os-release'))
    expect(b.ino).toBe(a.ino)
  })

  it("a maintainer script's writes stay in the layer: the preset and the host's files are unchanged", async () => {
    expect(await fs.readFile(path.join(layer.rootfs, 'etc/debian_version'), 'utf8')).toContain(MARK)
    for (const [f, text] of hostBefore) expect(await fs.readFile(f, 'utf8'), f).toBe(text)
    await expectPresetUntouched()
  })

  it('a recipe file over a linked preset file replaces it in the layer alone', async () => {
    expect(await fs.readFile(path.join(layer.rootfs, 'etc/issue'), 'utf8')).toBe(`${MARK}\n`)
    await expectPresetUntouched()
  })

  it('root in a sandbox of the recipe writing linked files changes neither image', async () => {
    const sb = await rt.create({ image: NAME, driver: 'namespace' })
    const r = await sb.exec('sh', [
      '-c',
      `echo ${MARK} >> /etc/os-release && chmod 0777 /usr/bin/python3 && rm /etc/issue.net`,
    ])
    expect(r.exitCode, r.stderr).toBe(0)
    await sb.stop()
    await expectPresetUntouched()
    expect(await fs.readFile(path.join(layer.rootfs, 'etc/os-release'), 'utf8')).toBe(
      presetBefore.get('etc/os-release'),
    )
  }, 120_000)

  it('apt downloads as _apt; a tree where _apt cannot reach its download directory fails instead of downloading as root', async () => {
    // The preset's tree, linked, with /var/lib/apt/lists closed to every user but root.
    const lower = path.join(dir, 'closed-lists')
    execFileSync('cp', ['-al', preset.rootfs, lower])
    await fs.chmod(path.join(lower, 'var/lib/apt/lists'), 0o700)
    const workDir = path.join(dir, 'closed-build')
    await fs.mkdir(workDir)
    const build = buildLayerOverPreset({
      lower,
      packages: ['python3-six'],
      recommends: false,
      debs: [],
      workDir,
      target: path.join(workDir, 'rootfs'),
    })
    await expect(build).rejects.toMatchObject({
      code: 'S102',
      message: expect.stringContaining('outside its _apt sandbox'),
    })
    await expect(fs.stat(path.join(workDir, 'rootfs'))).rejects.toMatchObject({ code: 'ENOENT' })
    await expectPresetUntouched()
  }, 120_000)
})
