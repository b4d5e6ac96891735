/**
 * Scientific Python as a recipe on the python preset: numpy, pandas and matplotlib from Debian
 * import and plot, which needs what their maintainer scripts make (the libblas/liblapack
 * alternatives above all), without their Recommends.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { BuildResult } from '../../lib/images/index.js'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'
import { SHARED_CACHE, sharedStore } from './helpers.js'

const SCIENTIFIC = { base: 'python', packages: ['python3-numpy', 'python3-pandas', 'python3-matplotlib'] }

let rt: Runtime
let image: BuildResult
let sb: Sandbox

beforeAll(async () => {
  image = await sharedStore().register('scientific-python', SCIENTIFIC)
  rt = testRuntime({ cacheDir: SHARED_CACHE })
  sb = await rt.create({ image: 'scientific-python', driver: 'namespace', memoryMb: 1024 })
}, 900_000)

afterAll(async () => {
  await rt?.close()
})

describe('the scientific Python recipe', () => {
  it('imports numpy, pandas and matplotlib and saves a figure', async () => {
    const script = [
      'import numpy, pandas, matplotlib',
      'import matplotlib.pyplot as plt',
      'frame = pandas.DataFrame({"x": numpy.arange(10), "y": numpy.arange(10) ** 2})',
      'frame.plot(x="x", y="y")',
      'plt.savefig("/tmp/a.png")',
      'print(matplotlib.get_backend().lower(), int(numpy.linalg.det(numpy.eye(3))))',
    ].join('\n')
    const r = await sb.exec('python3', ['-c', script], { timeoutMs: 120_000 })
    expect(r.exitCode, r.stderr).toBe(0)
    expect(r.stdout).toBe('agg 1\n')
    const png = await sb.fs.readFile('/tmp/a.png')
    expect(png.data.subarray(0, 8)).toEqual(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]))
  }, 150_000)

  it('has the BLAS and LAPACK alternatives their maintainer scripts registered', async () => {
    const r = await sb.exec('sh', [
      '-c',
      'readlink -f /usr/lib/*-linux-gnu/libblas.so.3 /usr/lib/*-linux-gnu/liblapack.so.3',
    ])
    expect(r.exitCode, r.stderr).toBe(0)
    expect(r.stdout.trim().split('\n')).toHaveLength(2)
    const names = image.manifest.packages.map((p) => p.name)
    expect(names).toEqual(expect.arrayContaining(['python3-numpy', 'python3-pandas', 'python3-matplotlib']))
    // Recommends stay out: pandas recommends numexpr, bottleneck and openpyxl; pip a compiler.
    for (const recommended of ['python3-numexpr', 'python3-bottleneck', 'python3-openpyxl'])
      expect(names).not.toContain(recommended)
    expect(names).not.toContain('gcc')
  })
})
