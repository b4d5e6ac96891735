/**
 * Bearer-token auth on a real registry (docker-registry with a token service signing RS256
 * JWTs): a private repository pulls with the Docker config's credentials sent to the token
 * service only, and without them the anonymous token is refused (S102).
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ImageStore } from '../../lib/images/index.js'
import { plainLayer, pushImage, startRegistry, tarLayer, type Registry } from '../images/oci-registry.js'
import { startTokenServer, type TokenServer } from '../images/oci-token-server.js'

let registry: Registry
let tokens: TokenServer
let work: string
const savedConfig = process.env.DOCKER_CONFIG

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-oci-token-'))
  tokens = await startTokenServer(work, { bob: 'hunter2' })
  registry = await startRegistry({ token: tokens })
  const layer = plainLayer(await tarLayer([{ name: 'token-only', content: 'behind a token' }]))
  await pushImage(
    registry,
    'private/tok',
    '1',
    [layer],
    {},
    { authorization: `Bearer ${tokens.token('private/tok', ['pull', 'push'])}` },
  )
})

afterAll(async () => {
  process.env.DOCKER_CONFIG = savedConfig
  tokens?.close()
  await registry?.stop()
  fs.rmSync(work, { recursive: true, force: true })
})

function dockerConfig(content: object): void {
  const dir = fs.mkdtempSync(path.join(work, 'docker-'))
  fs.writeFileSync(path.join(dir, 'config.json'), JSON.stringify(content))
  process.env.DOCKER_CONFIG = dir
}

describe('OCI Bearer tokens', () => {
  it('oci token: without credentials the anonymous token is refused; with them the pull succeeds', async () => {
    dockerConfig({})
    const store = new ImageStore({ cacheDir: path.join(work, 'cache') })
    await expect(store.pull(`${registry.host}/private/tok:1`)).rejects.toMatchObject({
      code: 'S102',
      message: expect.stringContaining('access denied'),
    })
    expect(tokens.requests.at(-1)).toEqual({ authorized: false, scope: 'repository:private/tok:pull' })
    dockerConfig({ auths: { [registry.host]: { username: 'bob', password: 'hunter2' } } })
    const image = await store.pull(`${registry.host}/private/tok:1`)
    expect(fs.readFileSync(path.join(image.rootfs, 'token-only'), 'utf8')).toBe('behind a token')
    expect(tokens.requests.at(-1)).toEqual({ authorized: true, scope: 'repository:private/tok:pull' })
  })
})
