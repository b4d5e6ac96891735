/**
 * apt inside a Debian preset: the image's apt sources are the archive and suite its build used,
 * and `apt-get update && apt-get install -y <pkg>` works as the sandbox's root, with no
 * capability, through a policy that names that archive (whose hosts come from the image's own
 * manifest, never from this file). The shared image is left as it was.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { BuildResult } from '../../lib/images/index.js'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'
import { SHARED_CACHE, sharedStore } from './helpers.js'

let rt: Runtime
let image: BuildResult
let sb: Sandbox

beforeAll(async () => {
  image = await sharedStore().build('python')
  rt = testRuntime({ cacheDir: SHARED_CACHE })
  const hosts = [...new Set((image.manifest.archive?.sources ?? []).map((s) => new URL(s.uri).host))]
  sb = await rt.create({ image: 'python', driver: 'namespace', network: { allow: hosts } })
}, 600_000)

afterAll(async () => {
  await rt?.close()
})

describe('apt in a Debian preset', () => {
  it("lists the build's archive and suite in its apt sources", async () => {
    const sources = image.manifest.archive?.sources ?? []
    expect(sources.map((s) => s.dist)).toContain(image.manifest.recipe?.suite)
    const list = (await sb.exec('cat', ['/etc/apt/sources.list'])).stdout
    for (const { uri, dist } of sources) expect(list).toContain(`deb ${uri} ${dist} main`)
  })

  it('apt-get update && apt-get install -y hello works as root without capabilities', async () => {
    const r = await sb.exec('sh', ['-c', 'apt-get update && apt-get install -y hello && hello'], {
      timeoutMs: 300_000,
    })
    expect(r.exitCode, `${r.stdout}\n${r.stderr}`).toBe(0)
    expect(r.stdout).toContain('Hello, world!')
    const status = await sb.exec('dpkg-query', ['-W', '-f', '${db:Status-Status} ${Version}', 'hello'])
    expect(status.stdout).toMatch(/^installed \S+$/)
    // Documentation stays out of packages installed later too (the image's dpkg configuration).
    expect((await sb.exec('ls', ['/usr/share/doc/hello'])).stdout).toBe('copyright\n')
    expect((await sb.exec('test', ['-e', '/usr/share/man/man1/hello.1.gz'])).exitCode).toBe(1)
  }, 330_000)

  it('leaves the shared image as it was built', async () => {
    expect(await sharedStore().verify('python')).toBe(true)
  }, 60_000)
})
