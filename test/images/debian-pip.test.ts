/**
 * pip in the python preset: `pip install <pkg>` without flags, from a package index on the
 * test's own loopback (a wheel built here), into the default virtual environment, with Debian's
 * own Python packages still importable; another user's install goes to its ~/.local; and
 * `python3 -m venv` works. The sandbox reaches the index through a name pinned to 127.0.0.1.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'
import { SHARED_CACHE, sharedStore } from './helpers.js'
import { pureWheel, servePackageIndex, type PackageIndex } from './python-index.js'

const INDEX_HOST = 'pypi.krunbox.test'
const WHEEL = 'krunbox_probe-1.0-py3-none-any.whl'
const USER_WHEEL = 'krunbox_user_probe-1.0-py3-none-any.whl'

let rt: Runtime
let index: PackageIndex
let sb: Sandbox

beforeAll(async () => {
  await sharedStore().build('python')
  index = await servePackageIndex({
    'krunbox-probe': { file: WHEEL, wheel: pureWheel('krunbox-probe', '1.0', 'krunbox_probe', 'from-the-index') },
    'krunbox-user-probe': {
      file: USER_WHEEL,
      wheel: pureWheel('krunbox-user-probe', '1.0', 'krunbox_user_probe', 'for-the-user'),
    },
  })
  rt = testRuntime({ cacheDir: SHARED_CACHE })
  sb = await rt.create({
    image: 'python',
    driver: 'namespace',
    network: { allow: [`${INDEX_HOST}:${index.port}`], hosts: { [INDEX_HOST]: '127.0.0.1' }, allowHostLoopback: true },
    // Configuration, not flags: where the index is, and that it is plain HTTP.
    env: {
      PIP_INDEX_URL: `http://${INDEX_HOST}:${index.port}/simple`,
      PIP_TRUSTED_HOST: INDEX_HOST,
      PIP_DISABLE_PIP_VERSION_CHECK: '1',
    },
  })
}, 600_000)

afterAll(async () => {
  await rt?.close()
  await index?.close()
})

const IMPORT_BOTH =
  'import krunbox_probe, packaging; print(krunbox_probe.VALUE, krunbox_probe.__file__, packaging.__file__)'

describe('pip in the python preset', () => {
  it('pip install <pkg> without flags goes into the default virtual environment; Debian packages stay importable', async () => {
    const install = await sb.exec('pip', ['install', 'krunbox-probe'], { timeoutMs: 120_000 })
    expect(install.exitCode, `${install.stdout}\n${install.stderr}`).toBe(0)
    expect(index.requests).toContain(`/files/${WHEEL}`)
    const run = await sb.exec('python3', ['-c', IMPORT_BOTH])
    expect(run.stderr).toBe('')
    expect(run.stdout).toBe(
      'from-the-index /opt/venv/lib/python3.13/site-packages/krunbox_probe/__init__.py /usr/lib/python3/dist-packages/packaging/__init__.py\n',
    )
    // A login shell finds the same environment.
    expect((await sb.exec('bash', ['-lc', 'command -v python3 pip'])).stdout).toBe(
      '/opt/venv/bin/python3\n/opt/venv/bin/pip\n',
    )
  }, 150_000)

  it("another user's pip install goes to its own ~/.local", async () => {
    const install = await sb.exec('pip', ['install', 'krunbox-user-probe'], { user: 'sandbox', timeoutMs: 120_000 })
    expect(install.exitCode, `${install.stdout}\n${install.stderr}`).toBe(0)
    const run = await sb.exec(
      'python3',
      ['-c', 'import krunbox_user_probe, packaging; print(krunbox_user_probe.VALUE, krunbox_user_probe.__file__)'],
      { user: 'sandbox' },
    )
    expect(run.stderr).toBe('')
    expect(run.stdout).toBe(
      'for-the-user /workspace/.local/lib/python3.13/site-packages/krunbox_user_probe/__init__.py\n',
    )
  }, 150_000)

  it('python3 -m venv makes a working environment', async () => {
    const r = await sb.exec('sh', ['-c', 'python3 -m venv /tmp/v && /tmp/v/bin/python -m pip --version'], {
      timeoutMs: 120_000,
    })
    expect(r.exitCode, `${r.stdout}\n${r.stderr}`).toBe(0)
    expect(r.stdout).toMatch(/^pip \d+\.\d+(\.\d+)? from \/tmp\/v\/lib\/python3\.13\/site-packages\/pip /)
  }, 150_000)
})
