/**
 * An OCI image whose User is not root, pulled and booted by a host user that is not root: with
 * no subordinate ids, create fails at once with S226 naming the User, the host user and the fix
 * (create({ user: '0' }) still boots it); with them, its commands run as that User.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { ImageStore } from '../../lib/images/index.js'
import { libkrunDoublePath, libkrunfwDoubleDir } from '../fixtures/libkrun-double/index.js'
import { asNobody, asRoot, checkoutUnreachable, NOBODY } from '../helpers/rootless.js'
import { ensureNativeBuilt } from '../native/helpers.js'
import { holdingSubordinateIdFiles, withSubordinateIds } from '../helpers/subids.js'
import {
  gzipLayer,
  plainLayer,
  pushImage,
  startRegistry,
  tarDirectory,
  tarLayer,
  type Registry,
} from './oci-registry.js'

const skip = !asRoot || checkoutUnreachable !== null
const why = !asRoot ? 'not root: cannot run a fixture as nobody nor edit /etc/subuid' : checkoutUnreachable
let registry: Registry
let reference: string

beforeAll(async () => {
  if (skip) return
  registry = await startRegistry()
  const base = gzipLayer(tarDirectory((await new ImageStore().resolve('base')).rootfs))
  const app = plainLayer(
    await tarLayer([
      { name: 'etc/passwd', content: 'root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n' },
      { name: 'home/app/', type: 'directory', uid: 1000, gid: 1000, mode: 0o700 },
      { name: 'home/app/private', content: 'only app', uid: 1000, gid: 1000, mode: 0o600 },
    ]),
  )
  await pushImage(registry, 'rootless/app', '1', [base, app], { user: 'app' })
  reference = `${registry.host}/rootless/app:1`
}, 120_000)

afterAll(async () => {
  await registry?.stop()
})

describe.skipIf(skip)(`an OCI image with a non-root User on a rootless host${why ? ` (skipped: ${why})` : ''}`, () => {
  it('without subordinate ids: create is S226 naming the User, the host user and the fix; user 0 boots', async () => {
    // Under shadow's lock, so a concurrent test cannot give nobody a range meanwhile.
    await holdingSubordinateIdFiles(async (files) => {
      expect(`${files.subuid}\n${files.subgid}`).not.toMatch(/^(nobody|65534):/m)
      const { result: r, cleanup } = await asNobody('oci-user-rootless-child.ts', () => [reference])
      try {
        expect(r.uid).toBe(NOBODY)
        expect(r.code).toBe('S226')
        expect(r.message).toContain('user "app": id 1000 is not mapped')
        expect(r.message).toContain(`the User of image ${reference}`)
        expect(r.message).toContain('host user nobody has no subordinate ids: add a line "nobody:<first id>:65536"')
        expect(r.message).toContain('/etc/subuid')
        expect(r.asImageUser).toBe(null)
        expect(r.asRoot).toBe('0\n')
      } finally {
        cleanup()
      }
    })
  }, 120_000)

  it("with subordinate ids: the image's commands run as its User", async () => {
    await withSubordinateIds('nobody', 65_536, async () => {
      const { result: r, cleanup } = await asNobody('oci-user-rootless-child.ts', () => [reference])
      try {
        expect(r).toMatchObject({ uid: NOBODY, code: null, asImageUser: '1000\n', asRoot: '0\n' })
        // Unpacked in nobody's subordinate ids: the image's owners are kept, its User writes its home.
        expect(r.home).toBe('1000:1000\n1000:1000\nonly appwrote\n')
        // Read in the same mapped namespace: before, /home/app (0700, uid 1000) was EACCES here.
        expect(r.verified).toBe(true)
        expect(r).toMatchObject({ removed: true, left: [] })
      } finally {
        cleanup()
      }
    })
  }, 120_000)

  it("with subordinate ids, under the krun driver (libkrun TEST DOUBLE, no VM boots): the guest sees the image's owners", async () => {
    ensureNativeBuilt()
    const saved = { ...process.env }
    Object.assign(process.env, {
      KRUNBOX_KRUN_ASSUME_USABLE: '1',
      KRUNBOX_LIBKRUN_PATH: libkrunDoublePath,
      LD_LIBRARY_PATH: libkrunfwDoubleDir,
    })
    try {
      await withSubordinateIds('nobody', 65_536, async () => {
        const { result: r, cleanup } = await asNobody('oci-user-rootless-child.ts', () => [reference, 'krun'])
        try {
          expect(r).toMatchObject({ uid: NOBODY, code: null, asImageUser: '1000\n', asRoot: '0\n' })
          // The VMM's user namespace maps nobody's subordinate ids too: before, it mapped nobody
          // alone and the guest saw /home/app as 65534:65534, which user 1000 could not enter.
          expect(r.home).toBe('1000:1000\n1000:1000\nonly appwrote\n')
          expect(r).toMatchObject({ removed: true, left: [] })
        } finally {
          cleanup()
        }
      })
    } finally {
      for (const key of Object.keys(process.env)) if (!(key in saved)) delete process.env[key]
      Object.assign(process.env, saved)
    }
  }, 120_000)
})
