/**
 * The presets' runtimes in real sandboxes: Node of the LTS line with its npm, pip in the
 * python presets; and each preset's id is the one its recipe, the archive's InRelease files the
 * build fetched and its npm pins give. Uses the shared cache the other image tests build.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { BuildResult } from '../../lib/images/index.js'
import { NODE_LTS } from '../../lib/images/presets.js'
import { imageId, sourceState } from '../../lib/images/recipe.js'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'
import { SHARED_CACHE, sharedStore } from './helpers.js'

let rt: Runtime
const images: Record<string, BuildResult> = {}
const sandboxes: Record<string, Sandbox> = {}

beforeAll(async () => {
  const store = sharedStore()
  for (const name of ['python', 'node', 'python-node']) images[name] = await store.build(name)
  rt = testRuntime({ cacheDir: SHARED_CACHE })
  for (const name of ['python', 'node', 'python-node'])
    sandboxes[name] = await rt.create({ image: name, driver: 'namespace' })
}, 600_000)

afterAll(async () => {
  await rt?.close()
})

async function stdout(sb: Sandbox, cmd: string, args: string[]): Promise<string> {
  const r = await sb.exec(cmd, args)
  expect(r.exitCode, r.stderr).toBe(0)
  return r.stdout
}

describe('preset runtimes', () => {
  it(`node --version is Node ${NODE_LTS.major} in node and python-node, with npm ${NODE_LTS.npmMajor}`, async () => {
    for (const name of ['node', 'python-node']) {
      expect(await stdout(sandboxes[name], 'node', ['--version'])).toMatch(
        new RegExp(`^v${NODE_LTS.major}\\.\\d+\\.\\d+\\n$`),
      )
      expect(await stdout(sandboxes[name], 'npm', ['--version'])).toMatch(
        new RegExp(`^${NODE_LTS.npmMajor}\\.\\d+\\.\\d+\\n$`),
      )
      expect(await stdout(sandboxes[name], 'node', ['-p', 'process.execPath'])).toBe('/usr/local/bin/node\n')
    }
    const pin = images.node.manifest.npm?.find((p) => p.name.startsWith('node-linux-'))
    expect(await stdout(sandboxes.node, 'node', ['--version'])).toBe(`v${pin?.version}\n`)
  })

  it('pip --version works in python and python-node', async () => {
    for (const name of ['python', 'python-node']) {
      expect(await stdout(sandboxes[name], 'pip', ['--version'])).toMatch(
        /^pip \d+\.\d+(\.\d+)? from \/usr\/lib\/python3\/dist-packages\/pip \(python 3\.\d+\)\n$/,
      )
    }
  })

  it('each id is its recipe with the InRelease digests its build fetched and its npm pins', () => {
    for (const image of Object.values(images)) {
      const { recipe, archive, npm } = image.manifest
      expect(archive?.fetched.length).toBeGreaterThan(0)
      expect(image.id).toBe(imageId(recipe!, sourceState(archive?.fetched ?? [], npm ?? [])))
    }
  })
})
