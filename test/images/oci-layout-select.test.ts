/**
 * An OCI layout (or a docker save) holding several images: import takes the one its ref name
 * annotation names (`{ ref }` or `<path>:<ref>`), and without one says which names there are;
 * a layout or docker save given to customImages / register as a root filesystem says to import
 * it. (Issue 41.)
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ImageStore } from '../../lib/images/index.js'
import { writeLayoutOf } from './oci-layout.js'
import { gzipLayer, imageConfig, sha256, tarLayer } from './oci-registry.js'

let work: string
let layout: string
let dockerTar: string
const hex = (d: string) => d.slice('sha256:'.length)

/** An image whose one layer holds a file /which saying `which`, and WHICH=`which` in its config. */
async function image(which: string) {
  const layer = gzipLayer(
    await tarLayer([
      { name: 'etc/', type: 'directory' },
      { name: 'which', content: which },
    ]),
  )
  return { layers: [layer], c: { env: [`WHICH=${which}`] }, refName: which }
}

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-layout-select-'))
  layout = path.join(work, 'layout')
  const images = [await image('app'), await image('tools')]
  writeLayoutOf(layout, images)
  // The same two images as a docker save of two tags.
  const saved = path.join(work, 'saved')
  fs.mkdirSync(saved)
  const entries = images.map(({ layers: [layer], c, refName }) => {
    const config = imageConfig([layer], c)
    fs.writeFileSync(path.join(saved, `${hex(sha256(config))}.json`), config)
    fs.writeFileSync(path.join(saved, `${refName}.tar.gz`), layer.blob)
    return { Config: `${hex(sha256(config))}.json`, RepoTags: [`team/${refName}:1`], Layers: [`${refName}.tar.gz`] }
  })
  fs.writeFileSync(path.join(saved, 'manifest.json'), JSON.stringify(entries))
  dockerTar = path.join(work, 'two.tar')
  expect(spawnSync('tar', ['-C', saved, '-cf', dockerTar, '.']).status).toBe(0)
})
afterAll(() => {
  fs.rmSync(work, { recursive: true, force: true })
})

const store = (name: string) => new ImageStore({ cacheDir: path.join(work, `cache-${name}`) })
const which = (rootfs: string) => fs.readFileSync(path.join(rootfs, 'which'), 'utf8')

describe('an image layout with several images', () => {
  it('without a ref: S106 listing the names there are', async () => {
    await expect(store('none').import(layout, { name: 'x' })).rejects.toMatchObject({
      code: 'S106',
      message: expect.stringMatching(/holds 2 images \("app", "tools"\)/),
    })
  })

  it('{ ref } and <path>:<ref> take the image of that name', async () => {
    const s = store('ref')
    expect(which((await s.import(layout, { name: 'tools-image', ref: 'tools' })).rootfs)).toBe('tools')
    const app = await s.import(`${layout}:app`, { name: 'app-image' })
    expect(which(app.rootfs)).toBe('app')
    expect(app.manifest.oci?.config.env).toEqual({ WHICH: 'app' })
  })

  it('a ref the layout does not have: S106 naming it and the names there are', async () => {
    await expect(store('missing').import(layout, { name: 'x', ref: 'nope' })).rejects.toMatchObject({
      code: 'S106',
      message: expect.stringMatching(/no image named "nope"; the names there are: "app", "tools"/),
    })
  })

  it('a docker save of two tags: picked by repository:tag or by tag, listed without one', async () => {
    const s = store('docker')
    await expect(s.import(dockerTar, { name: 'x' })).rejects.toMatchObject({
      code: 'S106',
      message: expect.stringContaining('"team/app:1", "team/tools:1"'),
    })
    expect(which((await s.import(dockerTar, { name: 'd-tools', ref: 'team/tools:1' })).rootfs)).toBe('tools')
    expect(which((await s.import(`${dockerTar}:team/app:1`, { name: 'd-app' })).rootfs)).toBe('app')
    // A tag alone picks an image only where one image has it.
    await expect(s.import(`${dockerTar}:1`, { name: 'x' })).rejects.toMatchObject({
      code: 'S106',
      message: expect.stringContaining('the tag "1" names 2 of its images'),
    })
  })
})

describe('an image archive given where a root filesystem is expected', () => {
  it('register() of a layout directory or a docker save tar says to import it (S105)', async () => {
    const s = store('custom')
    for (const source of [layout, dockerTar])
      await expect(s.register('not-a-tree', source)).rejects.toMatchObject({
        code: 'S105',
        message: expect.stringContaining('rt.images.import(path, { name })'),
      })
  })
})
