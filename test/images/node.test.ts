import { beforeAll, describe, expect, it } from 'vitest'
import type { BuildResult } from '../../lib/images/index.js'
import { runInImage, sharedStore } from './helpers.js'

describe('node and python-node presets', () => {
  let node: BuildResult
  let both: BuildResult

  beforeAll(async () => {
    const store = sharedStore()
    node = await store.build('node')
    both = await store.build('python-node')
  }, 360_000)

  it('node runs node -e', () => {
    const run = runInImage(node.rootfs, ['node', '-e', 'console.log(1)'])
    expect(run.stderr).toBe('')
    expect(run.stdout).toBe('1\n')
  })

  it('node has npm and a shell', () => {
    const run = runInImage(node.rootfs, ['/bin/sh', '-c', 'npm --version'])
    expect(run.status).toBe(0)
    expect(run.stdout).toMatch(/^\d+\.\d+\.\d+\n$/)
  })

  it('python-node runs both interpreters', () => {
    expect(runInImage(both.rootfs, ['node', '-e', 'console.log(1)']).stdout).toBe('1\n')
    expect(runInImage(both.rootfs, ['python3', '-c', 'import json,sqlite3;print(1)']).stdout).toBe('1\n')
  })

  it('records Node and npm from the npm registry, not Debian packages', () => {
    expect(node.manifest.npm?.map((p) => p.name)).toEqual([expect.stringMatching(/^node-linux-(x64|arm64)$/), 'npm'])
    expect(node.manifest.packages.map((p) => p.name)).not.toContain('nodejs')
    expect(both.manifest.packages.map((p) => p.name)).toEqual(expect.arrayContaining(['python3', 'python3-pip']))
    expect(node.id).not.toBe(both.id)
  })
})
