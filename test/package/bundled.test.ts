/**
 * krunbox copied into an app's bundle by esbuild, away from its addon: a create is S303 telling
 * to mark krunbox external, and `krunbox doctor` bundled the same way still runs (no addon) and
 * tells what the host has. And a preset build on a PATH without mmdebstrap is S102 naming it
 * with its install command. (Issue 31.)
 */
import { execFile } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { CLI, ensureCliBuilt, krunbox, privateCliEnv, repoRoot } from '../cli/helpers.js'

const run = promisify(execFile)
const app = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-bundled-'))

beforeAll(async () => {
  await ensureCliBuilt()
  fs.writeFileSync(
    path.join(app, 'app.mjs'),
    `import { Runtime } from ${JSON.stringify(path.join(repoRoot, 'dist', 'index.js'))}
const rt = new Runtime({ stateDir: process.argv[2] })
try {
  await rt.create({ image: 'base' })
  console.log('created')
} catch (err) {
  console.log(JSON.stringify({ name: err.constructor.name, code: err.code, message: err.message }))
}
await rt.close()
`,
  )
  const esbuild = path.join(repoRoot, 'node_modules', '.bin', 'esbuild')
  const common = ['--bundle', '--platform=node', '--format=esm', '--log-level=error']
  // The same as an app's build without --external:krunbox; CommonJS packages need require in ESM output.
  const banner = `--banner:js=import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);`
  await run(esbuild, [path.join(app, 'app.mjs'), ...common, banner, `--outfile=${path.join(app, 'out', 'app.mjs')}`])
  await run(esbuild, [CLI, ...common, banner, `--outfile=${path.join(app, 'out', 'cli.mjs')}`])
}, 120_000)
afterAll(() => fs.rmSync(app, { recursive: true, force: true }))

describe('krunbox bundled into an app', () => {
  it('a create is S303 naming the bundle and saying to mark krunbox external', async () => {
    const { stdout } = await run(process.execPath, [path.join(app, 'out', 'app.mjs'), path.join(app, 'state')])
    const err = JSON.parse(stdout)
    expect(err).toMatchObject({ name: 'SandboxError', code: 'S303' })
    expect(err.message).toContain(`krunbox was loaded from ${path.join(app, 'out', 'app.mjs')}, outside its package`)
    expect(err.message).toContain('mark it external (esbuild --external:krunbox, webpack externals)')
  })

  it('krunbox doctor runs without the addon: the probe is said unavailable, the host tools are still listed', async () => {
    const { stdout } = await run(process.execPath, [path.join(app, 'out', 'cli.mjs'), 'doctor'], {
      env: privateCliEnv().env,
    })
    expect(stdout).toMatch(/^host probe: +unavailable: S303: /m)
    expect(stdout).toMatch(/^host tools:\n {2}bubblewrap \(bwrap\) +present\n/m)
    expect(stdout).toMatch(/^image cache: /m)
  })
})

describe('building a preset without mmdebstrap', () => {
  it('is S102 naming mmdebstrap and the command that installs it', async () => {
    const { home, env } = privateCliEnv()
    const bin = path.join(home, 'bin')
    fs.mkdirSync(bin)
    // Every program of PATH but mmdebstrap, and an empty image cache: the build must start.
    for (const dir of (process.env.PATH ?? '').split(':'))
      for (const name of fs.existsSync(dir) ? fs.readdirSync(dir) : [])
        if (name !== 'mmdebstrap' && !fs.existsSync(path.join(bin, name)))
          fs.symlinkSync(path.join(dir, name), path.join(bin, name))
    try {
      const r = await krunbox(['images', 'build', 'base'], {
        env: { ...env, PATH: bin, XDG_CACHE_HOME: path.join(home, 'cache') },
      })
      expect(r.code).toBe(125)
      expect(r.stderr).toMatch(/S102: .*mmdebstrap \(sudo apt-get install -y mmdebstrap\)/)
    } finally {
      fs.rmSync(home, { recursive: true, force: true })
    }
  })
})
