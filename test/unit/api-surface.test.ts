/**
 * The package's API is what its d.ts says, and nothing more: the built dist/index.d.ts (and
 * index.d.cts) list exactly the names of the committed test/unit/api-surface.txt, and every name
 * a caller can run is documented (README.md or docs/*.md). A change to the API is a diff of that
 * file; regenerate it with KRUNBOX_UPDATE_API_SURFACE=1 after a deliberate change.
 */
import fs from 'node:fs'
import path from 'node:path'
import { beforeAll, describe, expect, it } from 'vitest'
import { ensureCliBuilt, repoRoot } from '../cli/helpers.js'
import { formatSurface, listSurface, undocumented } from './api-surface.js'

const committed = path.join(repoRoot, 'test', 'unit', 'api-surface.txt')
const dts = (name: string) => fs.readFileSync(path.join(repoRoot, 'dist', name), 'utf8')
const docs = () =>
  [
    'README.md',
    ...fs
      .readdirSync(path.join(repoRoot, 'docs'))
      .filter((f) => f.endsWith('.md'))
      .map((f) => `docs/${f}`),
  ]
    .map((f) => fs.readFileSync(path.join(repoRoot, f), 'utf8'))
    .join('\n')

beforeAll(() => ensureCliBuilt(), 120_000)

describe('the public API', () => {
  it('dist/index.d.ts declares exactly the committed surface', () => {
    const surface = formatSurface(listSurface(dts('index.d.ts')))
    if (process.env.KRUNBOX_UPDATE_API_SURFACE === '1') fs.writeFileSync(committed, surface)
    expect(surface).toBe(fs.readFileSync(committed, 'utf8'))
  })

  it('dist/index.d.cts (require) declares the same surface', () => {
    expect(formatSurface(listSurface(dts('index.d.cts')))).toBe(formatSurface(listSurface(dts('index.d.ts'))))
  })

  it('leaks none of the internals the runtime uses to drive a sandbox', () => {
    const names = listSurface(dts('index.d.ts')).map((e) => e.name)
    for (const internal of [
      'Sandbox#setStatus',
      'Sandbox#attachBackend',
      'Sandbox#markFailed',
      'Sandbox#setImageVersion',
      'Sandbox#useSnapshots',
      'Sandbox#owned',
      'Sandbox#backend',
      'Command#begin',
      'Command#adopt',
      'Command#giveUp',
      'Runtime#killOwnedSync',
      'Runtime#state',
      'PortSocket#bind',
      'PortSocket#receive',
      'PortForward#track',
      'SandboxPool#take',
      'SnapshotStore#capture',
      'SnapshotStore#hold',
      'Sandbox.constructor',
      'Command.constructor',
    ]) {
      expect(names).not.toContain(internal)
    }
  })

  it('from plain JavaScript too: no internal method on the prototypes, and no constructor to call', async () => {
    const api = await import(path.join(repoRoot, 'dist', 'index.js'))
    for (const [cls, members] of [
      [
        api.Sandbox,
        [
          'setStatus',
          'attachBackend',
          'attachNetwork',
          'markFailed',
          'setImageVersion',
          'useSnapshots',
          'owned',
          'backend',
        ],
      ],
      [api.Command, ['begin', 'adopt', 'giveUp']],
      [api.Runtime, ['killOwnedSync', 'state']],
      [api.PortSocket, ['bind', 'receive', 'receiveEnd']],
      [api.PortForward, ['track']],
    ] as const) {
      for (const m of members) expect(m in cls.prototype, `${cls.name}.prototype.${m}`).toBe(false)
    }
    for (const cls of [api.Sandbox, api.Command, api.SandboxFs, api.PortSocket, api.PortForward]) {
      expect(() => new cls()).toThrow(
        expect.objectContaining({
          code: 'S001',
          message: expect.stringContaining(`${cls.name} has no public constructor`),
        }),
      )
    }
  })

  it('every name a caller can run is mentioned in README.md or docs/*.md', () => {
    expect(undocumented(listSurface(dts('index.d.ts')), docs()).map((e) => e.name)).toEqual([])
  })

  it('an undocumented member appears in the surface and fails the documentation check', () => {
    const leaky =
      'declare class Sandbox {\n    #private;\n    exec(): void;\n    setStatus(next: string): void;\n    private constructor();\n}\nexport { Sandbox };\n'
    const surface = listSurface(leaky)
    expect(formatSurface(surface)).toBe('Sandbox class\nSandbox#exec method\nSandbox#setStatus method\n')
    expect(undocumented(surface, 'Call `sb.exec()` on a `Sandbox`.').map((e) => e.name)).toEqual(['Sandbox#setStatus'])
  })
})
