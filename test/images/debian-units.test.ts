/** The pieces of a Debian build that need no archive: recipes, the image's configuration, dpkg's status, failure reasons. */
import fs from 'node:fs/promises'
import path from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { aptConfig, dpkgConfig, py3compileExcludes } from '../../lib/images/debian-config.js'
import { parseDpkgStatus } from '../../lib/images/dpkg-status.js'
import { ImageStore } from '../../lib/images/index.js'
import { failureReason } from '../../lib/images/mmdebstrap.js'
import { DEFAULT_SUITE } from '../../lib/images/presets.js'
import { customRecipe, presetRecipe, recipeDigest } from '../../lib/images/recipe.js'
import { testRuntime } from '../helpers/runtime.js'
import { tempDir } from './helpers.js'

const dirs: string[] = []
afterAll(async () => {
  for (const dir of dirs) await fs.rm(dir, { recursive: true, force: true })
})

describe('Debian recipes', () => {
  it('presets but base are built with apt from trixie; base is extracted', () => {
    expect(DEFAULT_SUITE).toBe('trixie')
    expect(presetRecipe('base', DEFAULT_SUITE)).toMatchObject({ variant: 'extract', pythonVenv: false })
    for (const name of ['python', 'python-node'])
      expect(presetRecipe(name, DEFAULT_SUITE)).toMatchObject({ variant: 'apt', pythonVenv: true, recommends: false })
    expect(presetRecipe('node', DEFAULT_SUITE)).toMatchObject({ variant: 'apt', pythonVenv: false })
    expect(presetRecipe('python', DEFAULT_SUITE).packages).toEqual(expect.arrayContaining(['python3-venv']))
  })

  it('recommends and local .debs are part of the id, the .debs by content', async () => {
    const dir = await tempDir('debian-units')
    dirs.push(dir)
    const deb = path.join(dir, 'a.deb')
    await fs.writeFile(deb, 'one')
    const plain = await customRecipe({ base: 'python', packages: ['jq'] }, DEFAULT_SUITE)
    const recommended = await customRecipe({ base: 'python', packages: ['jq'], recommends: true }, DEFAULT_SUITE)
    const withDeb = await customRecipe({ base: 'python', debs: [deb] }, DEFAULT_SUITE)
    expect(recommended.recommends).toBe(true)
    expect(recipeDigest(recommended)).not.toBe(recipeDigest(plain))
    expect(withDeb.debs).toEqual([{ name: 'a.deb', digest: expect.stringMatching(/^sha256:/) }])
    expect(JSON.stringify(withDeb)).not.toContain(dir)
    await fs.writeFile(deb, 'two')
    const changed = await customRecipe({ base: 'python', debs: [deb] }, DEFAULT_SUITE)
    expect(recipeDigest(changed)).not.toBe(recipeDigest(withDeb))
  })

  it('refuses bad recipe fields with their codes, naming the value', async () => {
    const store = new ImageStore({ cacheDir: await tempDir('debian-units-cache') })
    dirs.push(store.cacheDir)
    await expect(store.register('x', { base: 'python', recommends: 'yes' as never })).rejects.toMatchObject({
      code: 'S001',
      message: expect.stringContaining('recipe.recommends must be a boolean, got "yes"'),
    })
    await expect(store.register('x', { base: 'python', debs: ['/tmp/x.rpm'] })).rejects.toMatchObject({
      code: 'S001',
      message: expect.stringContaining('"/tmp/x.rpm"'),
    })
    await expect(store.register('x', { base: 'python', debs: 'a.deb' as never })).rejects.toMatchObject({
      code: 'S001',
    })
    await expect(store.register('x', { base: 'base', debs: ['/tmp/x.deb'] })).rejects.toMatchObject({
      code: 'S001',
      message: expect.stringContaining('need a Debian preset (python, node, python-node, code-interpreter)'),
    })
    await expect(store.register('x', { base: 'python', debs: ['/nonexistent/krunbox.deb'] })).rejects.toMatchObject({
      code: 'S104',
      message: expect.stringContaining('/nonexistent/krunbox.deb'),
    })
    const long = `${'p'.repeat(5000)}.deb`
    const error = await store.register('x', { base: 'base', packages: [long] }).catch((e: Error) => e)
    expect(error).toMatchObject({ code: 'S001' })
    expect((error as Error).message.length).toBeLessThan(400)
  })
})

describe('the suite', () => {
  it('is trixie unless the Runtime says images.suite; a bad one is refused naming it', async () => {
    const byDefault = testRuntime()
    const previous = testRuntime({ images: { suite: 'bookworm' } })
    try {
      expect(byDefault.images.suite).toBe('trixie')
      expect(previous.images.suite).toBe('bookworm')
    } finally {
      await Promise.all([byDefault.close(), previous.close()])
    }
    expect(() => testRuntime({ images: { suite: 'Bookworm!' } })).toThrow(
      expect.objectContaining({ code: 'S001', message: expect.stringContaining('"Bookworm!"') }),
    )
    expect(() => testRuntime({ images: { release: 'bookworm' } as never })).toThrow(
      expect.objectContaining({ code: 'S001', message: expect.stringContaining('release') }),
    )
  })
})

describe("a Debian image's configuration", () => {
  it('dpkg leaves docs, man pages, translations and Python test suites out, and does not fsync every file', () => {
    const lines = dpkgConfig().split('\n')
    expect(lines).toEqual(
      expect.arrayContaining([
        'force-unsafe-io',
        'path-exclude=/usr/share/doc/*/*',
        'path-include=/usr/share/doc/*/copyright',
        'path-exclude=/usr/share/man/*',
        'path-exclude=/usr/share/locale/*',
        'path-include=/usr/share/locale/locale.alias',
        'path-exclude=/usr/lib/python3/dist-packages/*/tests/*',
      ]),
    )
    expect(py3compileExcludes()).toBe('re|-|/usr/lib/python3/dist-packages/|.*/tests/.*\n')
  })

  it('apt installs no Recommends and downloads as root', () => {
    expect(aptConfig()).toContain('APT::Install-Recommends "false";')
    expect(aptConfig()).toContain('APT::Sandbox::User "root";')
  })
})

describe("dpkg's status", () => {
  it('lists the installed packages, sorted, and nothing half-installed or removed', () => {
    const status = [
      'Package: zlib1g\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1:1.3.dfsg-3\n',
      'Package: gone\nStatus: deinstall ok config-files\nArchitecture: amd64\nVersion: 1\n',
      'Package: half\nStatus: install ok half-configured\nArchitecture: all\nVersion: 2\n',
      'Package: base-files\nEssential: yes\nStatus: install ok installed\nArchitecture: amd64\nVersion: 13.8\n',
    ].join('\n')
    expect(parseDpkgStatus(status)).toEqual([
      { name: 'base-files', version: '13.8', arch: 'amd64' },
      { name: 'zlib1g', version: '1:1.3.dfsg-3', arch: 'amd64' },
    ])
  })
})

describe('why a build failed', () => {
  it("names a failing maintainer script with its exit status, else apt's first error", () => {
    const script = [
      'Setting up krunbox-x (1.0) ...',
      'marker',
      'dpkg: error processing package krunbox-x (--configure):',
      ' installed krunbox-x package post-installation script subprocess returned error exit status 3',
      'E: Sub-process /usr/bin/dpkg returned an error code (1)',
    ].join('\n')
    expect(failureReason(script)).toBe(
      'dpkg: error processing package krunbox-x (--configure): installed krunbox-x package post-installation script subprocess returned error exit status 3',
    )
    expect(failureReason('I: x\nE: Unable to locate package nope\nE: later')).toBe('E: Unable to locate package nope')
    expect(failureReason('nothing useful')).toBe('see output')
  })
})
