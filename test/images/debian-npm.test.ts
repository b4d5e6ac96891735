/**
 * npm in the node preset: `npm install <pkg>` in the workspace, from the npm registry this
 * machine's npm is configured with (read at run time), through a policy that names it. A
 * certificate authority the host's npm is told to trust (`cafile`, a TLS-inspecting egress, say)
 * is handed to the sandbox's npm the same way.
 */
import fs from 'node:fs'
import { execFileSync } from 'node:child_process'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'
import { SHARED_CACHE, sharedStore } from './helpers.js'

const npmConfig = (key: string) => execFileSync('npm', ['config', 'get', key], { encoding: 'utf8' }).trim()
const registry = npmConfig('registry')
const cafile = npmConfig('cafile')
const SANDBOX_CAFILE = '/tmp/host-npm-ca.crt'

let rt: Runtime
let sb: Sandbox

beforeAll(async () => {
  await sharedStore().build('node')
  rt = testRuntime({ cacheDir: SHARED_CACHE })
  sb = await rt.create({
    image: 'node',
    driver: 'namespace',
    network: { allow: [new URL(registry).host] },
    env: { npm_config_registry: registry, ...(cafile !== 'null' && { npm_config_cafile: SANDBOX_CAFILE }) },
  })
  if (cafile !== 'null') await sb.fs.writeFile(SANDBOX_CAFILE, fs.readFileSync(cafile))
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
