/**
 * npm in the node preset: `npm install <pkg>` in the workspace, from the npm registry this
 * machine's npm is configured with (read at run time), through a policy that names it.
 */
import { execFileSync } from 'node:child_process'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'
import { SHARED_CACHE, sharedStore } from './helpers.js'

const registry = execFileSync('npm', ['config', 'get', 'registry'], { encoding: 'utf8' }).trim()

let rt: Runtime
let sb: Sandbox

beforeAll(async () => {
  await sharedStore().build('node')
  rt = testRuntime({ cacheDir: SHARED_CACHE })
  sb = await rt.create({
    image: 'node',
    driver: 'namespace',
    network: { allow: [new URL(registry).host] },
    env: { npm_config_registry: registry },
  })
}, 600_000)

afterAll(async () => {
  await rt?.close()
})

describe('npm in the node preset', () => {
  it('npm install <pkg> installs from the registry and node requires it', async () => {
    const install = await sb.exec('npm', ['install', 'is-number@7.0.0'], {
      timeoutMs: 180_000,
    })
    expect(install.exitCode, `${install.stdout}\n${install.stderr}`).toBe(0)
    const run = await sb.exec('node', [
      '-p',
      "require('is-number')(42) + ' ' + require('is-number/package.json').version",
    ])
    expect(run.stderr).toBe('')
    expect(run.stdout).toBe('true 7.0.0\n')
    expect((await sb.exec('ls', ['/workspace/node_modules'])).stdout).toContain('is-number')
  }, 200_000)
})
