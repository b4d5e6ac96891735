/**
 * What an archive or a registry says reaches an error message capped: a 7 MiB config name in a
 * docker save manifest.json was echoed whole in its S106 message. Each string here is a
 * megabyte or more (or thousands of them); each message stays under 2 KiB and still shows
 * the start of what it names.
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import http from 'node:http'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ImageStore } from '../../lib/images/index.js'
import { imageConfig, plainLayer, sha256, tarLayer, type Layer } from '../images/oci-registry.js'
import { writeLayout } from '../images/oci-layout.js'

let work: string
let layer: Layer
const MiB = 1024 * 1024
const long = (c: string) => c.repeat(MiB)

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-oci-messages-'))
  layer = plainLayer(await tarLayer([{ name: 'etc/passwd', content: 'root:x:0:0:root:/root:/bin/sh\n' }]))
})

afterAll(() => {
  fs.rmSync(work, { recursive: true, force: true })
})

let count = 0
const store = () => new ImageStore({ cacheDir: path.join(work, `cache-${++count}`) })

/** The import's error, whose message must be short and show the start of `shown`. */
async function refusal(attempt: Promise<unknown>, code: string, shown: string): Promise<string> {
  const err = (await attempt.then(
    () => expect.fail('the import succeeded'),
    (e: unknown) => e,
  )) as { code: string; message: string }
  expect(err.code).toBe(code)
  expect(err.message.length).toBeLessThan(2048)
  expect(err.message).toContain(shown.slice(0, 40))
  return err.message
}

describe('archive and registry strings in messages', () => {
  it('oci message: a docker save manifest.json naming a 7 MiB config is refused with the name capped', async () => {
    const saved = path.join(work, 'saved')
    fs.mkdirSync(saved)
    const name = 'c'.repeat(7 * MiB)
    fs.writeFileSync(path.join(saved, 'manifest.json'), JSON.stringify([{ Config: name, Layers: [] }]))
    const archive = path.join(work, 'saved.tar')
    expect(spawnSync('tar', ['-C', saved, '-cf', archive, '.']).status).toBe(0)
    const message = await refusal(store().import(archive, { name: 'named' }), 'S106', name)
    expect(message).toContain('named by manifest.json is missing')
  })

  it("oci message: a layer entry of a megabyte's name that climbs with .. is refused with the name capped", async () => {
    const entry = `../${long('e')}`
    const layout = writeLayout(path.join(work, 'climb'), [plainLayer(await tarLayer([{ name: entry, content: 'x' }]))])
    const message = await refusal(store().import(layout, { name: 'climb' }), 'S102', entry)
    expect(message).toContain('climbs with ..')
  })

  it("oci message: a config's megabyte-long platform and User are named capped", async () => {
    const platform = imageConfig([layer], { architecture: long('a') })
    await refusal(
      store().import(writeLayout(path.join(work, 'arch'), [layer], {}, platform), { name: 'arch' }),
      'S106',
      `linux/${long('a')}`,
    )
    const user = long('u')
    await refusal(
      store().import(writeLayout(path.join(work, 'user'), [layer], { user }), { name: 'user' }),
      'S102',
      user,
    )
  })

  it('oci message: an index of five thousand platforms of a kilobyte each is named by its first few', async () => {
    const layout = writeLayout(path.join(work, 'platforms'), [layer])
    const manifests = Array.from({ length: 5000 }, (_, i) => ({
      mediaType: 'application/vnd.oci.image.manifest.v1+json',
      digest: sha256(`m${i}`),
      size: 1,
      platform: { os: 'linux', architecture: `${'p'.repeat(1024)}${i}` },
    }))
    fs.writeFileSync(path.join(layout, 'index.json'), JSON.stringify({ schemaVersion: 2, manifests }))
    const message = await refusal(store().import(layout, { name: 'platforms' }), 'S106', `linux/${'p'.repeat(64)}`)
    expect(message).toContain('and 4992 more')
  })

  it("oci message: a manifest's megabyte-long media type is named capped", async () => {
    const layout = writeLayout(path.join(work, 'media'), [layer])
    const type = long('t')
    const manifest = Buffer.from(JSON.stringify({ schemaVersion: 2, mediaType: type, layers: [] }))
    fs.writeFileSync(path.join(layout, 'blobs', 'sha256', sha256(manifest).slice(7)), manifest)
    fs.writeFileSync(
      path.join(layout, 'index.json'),
      JSON.stringify({ schemaVersion: 2, manifests: [{ mediaType: '', digest: sha256(manifest), size: 1 }] }),
    )
    await refusal(store().import(layout, { name: 'media' }), 'S106', type)
  })

  it("oci message: a registry's WWW-Authenticate challenge of 12 KB is named capped", async () => {
    const challenge = `Foo ${'w'.repeat(12 * 1024)}`
    const server = http.createServer((_req, res) => res.writeHead(401, { 'www-authenticate': challenge }).end())
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    try {
      const host = `127.0.0.1:${(server.address() as { port: number }).port}`
      const message = await refusal(store().pull(`${host}/auth/app:1`), 'S102', challenge)
      expect(message).toContain('asked for unsupported authentication')
    } finally {
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  })
})
