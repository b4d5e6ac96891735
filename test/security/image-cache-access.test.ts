/**
 * The image cache and its trees out of other local users' reach (lib/images/cache-access.ts),
 * and no setuid/setgid file in a tree on the host (lib/images/rootfs.ts dropHostHazards).
 * Trees keep /workspace 0777 and /tmp 1777: a user who can walk into the cache plants a file
 * every later sandbox of the image sees, and a setuid file of the sandbox root's host uid runs
 * as that uid for anyone. Attacked as another user, for root's cache under a 0755 directory, an
 * older cache made 0755 and a rootless user's cache under its 0755 home.
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SANDBOX_ID_BASE, SANDBOX_ID_COUNT } from '../../lib/drivers/idmap.js'
import { ImageStore } from '../../lib/images/index.js'
import { ownByIdRange } from '../../lib/images/ownership.js'
import { asNobody, asRoot, checkoutUnreachable, NOBODY, nodeAsNobody, nodeAsUser } from '../helpers/rootless.js'
import { testRuntime } from '../helpers/runtime.js'

/** What the attacker tries on every directory and regular file it is given: every answer, by attempt. */
const ATTACKER = `
const fs = require('node:fs')
const { execFileSync } = require('node:child_process')
const { dirs, files, run } = JSON.parse(fs.readFileSync(process.argv[1], 'utf8'))
const out = {}
const attempt = (what, f) => { try { f(); out[what] = 'done' } catch (e) { out[what] = e.code ?? String(e) } }
for (const d of dirs) {
  attempt('list ' + d, () => fs.readdirSync(d))
  attempt('plant in ' + d, () => fs.writeFileSync(d + '/planted', 'X'))
}
for (const f of files) attempt('read ' + f, () => fs.closeSync(fs.openSync(f, 'r')))
for (const f of run) attempt('run ' + f, () => execFileSync(f, ['-c', 'id -u'], { stdio: 'pipe' }))
process.stdout.write(JSON.stringify(out))
`

/** Every directory (the root included) and regular file under root; symlinks would resolve on the attacker's side. */
function entriesUnder(root: string): { dirs: string[]; files: string[] } {
  const found = { dirs: [root], files: [] as string[] }
  for (const name of fs.readdirSync(root)) {
    const p = path.join(root, name)
    const st = fs.lstatSync(p)
    if (st.isDirectory()) {
      const below = entriesUnder(p)
      found.dirs.push(...below.dirs)
      found.files.push(...below.files)
    } else if (st.isFile()) found.files.push(p)
  }
  return found
}

/** Files under root with a setuid or setgid bit (directories' setgid only picks a group). */
function privilegedFiles(root: string): string[] {
  const { files } = entriesUnder(root)
  return files.filter((f) => (fs.lstatSync(f).mode & 0o6000) !== 0)
}

let scratch: string

/** What `uid` reached in `cacheDir` (every attempt that did not end in EACCES), trying `run` as programs too. */
async function reachedBy(uid: number, cacheDir: string, run: string[]): Promise<Array<[string, string]>> {
  const list = path.join(fs.mkdtempSync(path.join(scratch, 'list-')), 'targets.json')
  fs.chmodSync(path.dirname(list), 0o755)
  const targets = { ...entriesUnder(cacheDir), run }
  fs.writeFileSync(list, JSON.stringify(targets), { mode: 0o644 })
  const answers = JSON.parse(await nodeAsUser(uid, ATTACKER, [list])) as Record<string, string>
  // Every attempt was made: two per directory, one per file and program.
  expect(Object.keys(answers)).toHaveLength(2 * targets.dirs.length + targets.files.length + run.length)
  return Object.entries(answers).filter(([, answer]) => answer !== 'EACCES')
}

/** A copy of the base image with a setuid and a setgid program (busybox). */
function sourceTree(dir: string, baseRootfs: string): { setuid: string; setgid: string } {
  execFileSync('cp', ['-a', baseRootfs, dir])
  const setuid = 'usr/bin/suid-sh'
  const setgid = 'usr/bin/sgid-sh'
  fs.copyFileSync(path.join(dir, 'usr/bin/busybox'), path.join(dir, setuid))
  fs.copyFileSync(path.join(dir, 'usr/bin/busybox'), path.join(dir, setgid))
  fs.chmodSync(path.join(dir, setuid), 0o4755)
  fs.chmodSync(path.join(dir, setgid), 0o2755)
  return { setuid, setgid }
}

beforeAll(() => {
  scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-cache-access-'))
  // A 0755 directory: only the cache's own mode stands between other users and it.
  fs.chmodSync(scratch, 0o755)
})

afterAll(() => {
  if (scratch) fs.rmSync(scratch, { recursive: true, force: true })
})

describe.skipIf(!asRoot)(
  `the image cache as another local user sees it${asRoot ? '' : ' (skipped: not root, the attacker is a setpriv child)'}`,
  () => {
    let cacheDir: string
    let ids: { dir: string; tar: string }
    let programs: { setuid: string; setgid: string }

    beforeAll(async () => {
      const base = await new ImageStore().resolve('base')
      const source = path.join(scratch, 'source')
      programs = sourceTree(source, base.rootfs)
      execFileSync('tar', ['-C', source, '-cf', path.join(scratch, 'source.tar'), '.'])
      cacheDir = path.join(scratch, 'cache')
      const store = new ImageStore({ cacheDir })
      ids = {
        dir: (await store.register('from-dir', source)).id,
        tar: (await store.register('from-tar', path.join(scratch, 'source.tar'))).id,
      }
    }, 120_000)

    /** Boots a sandbox of each image: the first boot shifts a tree into the sandbox's ids on a root host. */
    async function bootEach(command: string): Promise<string[]> {
      const rt = testRuntime({ cacheDir })
      try {
        const out: string[] = []
        for (const image of ['from-dir', 'from-tar']) {
          const sb = await rt.create({ image })
          out.push((await sb.exec('sh', ['-c', command])).stdout)
          await sb.stop()
        }
        return out
      } finally {
        await rt.close()
      }
    }

    it('root cache under a 0755 directory: nobody cannot list, read, write or run any part of it, and no sandbox sees a plant', async () => {
      await bootEach('true')
      const run = Object.values(ids).flatMap((id) =>
        Object.values(programs).map((p) => `${cacheDir}/${id}/rootfs/${p}`),
      )
      const reached = await reachedBy(NOBODY, cacheDir, run)
      expect(await bootEach('ls -A /workspace /tmp')).toEqual(['/tmp:\n\n/workspace:\n', '/tmp:\n\n/workspace:\n'])
      expect(reached).toEqual([])
      expect(fs.statSync(cacheDir).mode & 0o7777).toBe(0o700)
    }, 120_000)

    it('no tree holds a setuid or setgid file, before and after a boot shifted it into the sandbox ids', async () => {
      for (const id of Object.values(ids)) {
        expect(privilegedFiles(path.join(cacheDir, id, 'rootfs'))).toEqual([])
        const modes = Object.values(programs).map(
          (p) => fs.statSync(path.join(cacheDir, id, 'rootfs', p)).mode & 0o7777,
        )
        expect(modes).toEqual([0o755, 0o755])
      }
    })

    it('a tree an older krunbox published with setuid files loses them when a boot shifts it into the sandbox ids', async () => {
      const tree = fs.mkdtempSync(path.join(scratch, 'old-tree-'))
      fs.copyFileSync('/bin/true', path.join(tree, 'suid'))
      fs.chmodSync(path.join(tree, 'suid'), 0o6755)
      await ownByIdRange(tree, SANDBOX_ID_BASE, SANDBOX_ID_COUNT)
      expect(fs.statSync(path.join(tree, 'suid'))).toMatchObject({ uid: SANDBOX_ID_BASE, mode: 0o100755 })
    })

    it('an older cache made 0755 is closed at its first use', async () => {
      fs.chmodSync(cacheDir, 0o755)
      for (const id of Object.values(ids)) fs.chmodSync(path.join(cacheDir, id), 0o755)
      expect(
        JSON.parse(
          await nodeAsNobody(`process.stdout.write(JSON.stringify(require('fs').readdirSync(process.argv[1])))`, [
            cacheDir,
          ]),
        ),
      ).toContain(ids.dir)
      await new ImageStore({ cacheDir }).resolve('from-dir')
      expect(await reachedBy(NOBODY, cacheDir, [])).toEqual([])
      expect(fs.statSync(cacheDir).mode & 0o7777).toBe(0o700)
    }, 60_000)

    it('a cache directory of another user is refused (S005 naming it): it could plant files in every sandbox', async () => {
      const theirs = path.join(scratch, 'theirs')
      fs.mkdirSync(theirs, { mode: 0o700 })
      fs.chownSync(theirs, NOBODY, NOBODY)
      await expect(new ImageStore({ cacheDir: theirs }).resolve('base')).rejects.toMatchObject({
        code: 'S005',
        message: expect.stringContaining(`image cache ${theirs} belongs to uid ${NOBODY}`),
      })
      await expect(testRuntime({ cacheDir: theirs }).create({ image: 'base' })).rejects.toMatchObject({ code: 'S005' })
    })
  },
)

const rootlessSkip = !asRoot ? 'not root: cannot run a fixture as nobody' : checkoutUnreachable
describe.skipIf(rootlessSkip !== null)(
  `a rootless user's cache under its 0755 home${rootlessSkip ? ` (skipped: ${rootlessSkip})` : ''}`,
  () => {
    it("another user cannot reach nobody's cache, and nobody's tree holds no setuid or setgid file", async () => {
      const { work, result, cleanup } = await asNobody('../security/fixtures/image-cache-rootless.ts')
      try {
        expect(result).toMatchObject({ uid: NOBODY, booted: 'ok\n' })
        const cacheDir = result.cacheDir as string
        expect(cacheDir.startsWith(`${work}/`)).toBe(true)
        expect(fs.statSync(work).mode & 0o777).toBe(0o755)
        const rootfs = path.join(cacheDir, result.id as string, 'rootfs')
        // Any other uid: neither root nor nobody.
        expect(await reachedBy(NOBODY - 1, cacheDir, [path.join(rootfs, result.setuid as string)])).toEqual([])
        expect(privilegedFiles(rootfs)).toEqual([])
        expect(fs.statSync(cacheDir)).toMatchObject({ uid: NOBODY })
        expect(fs.statSync(cacheDir).mode & 0o7777).toBe(0o700)
      } finally {
        cleanup()
      }
    }, 120_000)
  },
)
