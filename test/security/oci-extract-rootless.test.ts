/**
 * The rootless unpack (lib/images/oci/userns.ts): a host user with subordinate ids unpacks in
 * a user namespace where it is root over its own files and its subordinate ids. A hostile image
 * must not turn that against the user's files: a symlink planted by layer 1 that layer 2 writes,
 * links, chmods and whites out through stays inside the rootfs, and an entry climbing with ..
 * is refused (not retryable); what was pulled is removed by the user, failed builds included.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { asNobody, asRoot, checkoutUnreachable, NOBODY } from '../helpers/rootless.js'
import { withSubordinateIds } from '../helpers/subids.js'
import { plainLayer, pushImage, startRegistry, tarLayer, type Registry } from '../images/oci-registry.js'

const skip = !asRoot || checkoutUnreachable !== null
const why = !asRoot ? 'not root: cannot run a fixture as nobody nor edit /etc/subuid' : checkoutUnreachable
let registry: Registry
let outside: string

beforeAll(async () => {
  if (skip) return
  registry = await startRegistry()
  // The user's own files: a rootless unpack could write them if it let a link lead it out.
  outside = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-oci-rootless-outside-'))
  fs.mkdirSync(path.join(outside, 'dir'))
  fs.writeFileSync(path.join(outside, 'victim'), 'precious')
  fs.writeFileSync(path.join(outside, 'dir', 'keep'), 'precious')
  fs.chmodSync(outside, 0o755)
  fs.chmodSync(path.join(outside, 'dir'), 0o755)
  for (const p of [outside, path.join(outside, 'dir'), path.join(outside, 'victim'), path.join(outside, 'dir', 'keep')])
    fs.chownSync(p, NOBODY, NOBODY)
}, 60_000)

afterAll(async () => {
  await registry?.stop()
  if (outside) fs.rmSync(outside, { recursive: true, force: true })
})

function outsideState(): string {
  const lines: string[] = []
  const walk = (dir: string) => {
    for (const name of fs.readdirSync(dir).sort()) {
      const p = path.join(dir, name)
      const st = fs.lstatSync(p)
      lines.push(
        `${path.relative(outside, p)} ${(st.mode & 0o7777).toString(8)} ${st.uid} ${st.isFile() ? fs.readFileSync(p, 'utf8') : ''}`,
      )
      if (st.isDirectory()) walk(p)
    }
  }
  walk(outside)
  return lines.join('\n')
}

describe.skipIf(skip)(`OCI unpack in the subordinate ids' namespace${why ? ` (skipped: ${why})` : ''}`, () => {
  it("oci rootless extract: links planted by layer 1 and a .. entry cannot reach the user's files, and the user removes what it pulled", async () => {
    const before = outsideState()
    const layer1 = plainLayer(
      await tarLayer([
        { name: 'owned', content: 'app', uid: 1000, gid: 1000 },
        { name: 'abs', type: 'symlink', linkname: outside },
        { name: 'rel', type: 'symlink', linkname: `../../../../../../../../..${outside}` },
        { name: 'victimlink', type: 'symlink', linkname: path.join(outside, 'victim') },
        { name: 'dirlink', type: 'symlink', linkname: path.join(outside, 'dir') },
      ]),
    )
    const layer2 = plainLayer(
      await tarLayer([
        { name: 'abs/pwned', content: 'x', uid: 1000 },
        { name: 'rel/pwned', content: 'x' },
        { name: 'victimlink', content: 'overwritten' },
        { name: 'abs/.wh.victim' },
        { name: 'rel/dir/.wh.keep' },
        { name: 'abs/dir/.wh..wh..opq' },
        { name: 'hard', type: 'link', linkname: 'abs/pwned' },
        { name: 'dirlink/', type: 'directory', mode: 0o777, uid: 1000 },
      ]),
    )
    await pushImage(registry, 'evil/rootless', '1', [layer1, layer2])
    await pushImage(registry, 'evil/rootless-climb', '1', [
      plainLayer(await tarLayer([{ name: `../../../../../../..${outside}/pwned`, content: 'x' }])),
    ])
    await withSubordinateIds('nobody', 65_536, async (start) => {
      const { result: r, cleanup } = await asNobody('oci-pull-rootless-child.ts', () => [
        `${registry.host}/evil/rootless:1`,
        `${registry.host}/evil/rootless-climb:1`,
      ])
      try {
        expect(r.uid).toBe(NOBODY)
        // Unpacked in the namespace (owners kept: image uid 1000 is subordinate id 1000), held inside.
        expect(r.pulls[0]).toMatchObject({ code: null, owner: start + 999 })
        expect(r.pulls[1]).toMatchObject({
          code: 'S102',
          retryable: false,
          message: expect.stringContaining('climbs with ..'),
        })
        expect(r.left).toEqual([])
      } finally {
        cleanup()
      }
    })
    expect(outsideState()).toBe(before)
  }, 180_000)
})
