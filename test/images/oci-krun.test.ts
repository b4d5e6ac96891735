/**
 * Both drivers boot the same published rootfs: a pulled OCI image under the krun driver, with
 * the libkrun TEST DOUBLE (build/test/libkrun-double.so) in place of libkrun. The double never
 * boots a VM, and this test is no evidence that one boots: what it shows is that the krun driver
 * hands the image's published rootfs (the one the namespace driver uses) to libkrun as the
 * guest's image share beside its boot root, and that the image's Env, WorkingDir and User reach
 * the agent running in VM mode (the double runs the real agent as the guest's PID 1).
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { stagedPaths } from '../../lib/drivers/idmap.js'
import { KRUN_IMAGE_TAG } from '../../lib/drivers/krun-shim-codec.js'
import { ImageStore, Runtime } from '../../lib/index.js'
import { hostProbe } from '../../lib/probe.js'
import {
  libkrunDoublePath,
  libkrunfwDoubleDir,
  readDoubleLog,
  type DoubleGuest,
} from '../fixtures/libkrun-double/index.js'
import { asRoot, checkoutUnreachable } from '../helpers/rootless.js'
import { ensureNativeBuilt } from '../native/helpers.js'
import {
  gzipLayer,
  plainLayer,
  pushImage,
  startRegistry,
  tarDirectory,
  tarLayer,
  type Registry,
} from './oci-registry.js'
import { restoreEnv } from '../helpers/env.js'

const PASSWD = 'root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n'
const savedEnv = { ...process.env }
/** On a root host the shim (and the double's guest) runs as the sandbox's ids and must reach the double in the checkout. */
const cannotBoot = asRoot ? checkoutUnreachable : null

let registry: Registry
let work: string

beforeAll(async () => {
  ensureNativeBuilt()
  registry = await startRegistry()
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-oci-krun-'))
  fs.chmodSync(work, 0o755)
  process.env.KRUNBOX_KRUN_ASSUME_USABLE = '1'
  process.env.KRUNBOX_LIBKRUN_PATH = libkrunDoublePath
  process.env.LD_LIBRARY_PATH = libkrunfwDoubleDir
  delete process.env.KRUN_DOUBLE_ENTER
  delete process.env.KRUN_DOUBLE_FAIL
  hostProbe({ refresh: true })
}, 120_000)

afterAll(async () => {
  restoreEnv(savedEnv)
  hostProbe({ refresh: true })
  await registry?.stop()
  fs.rmSync(work, { recursive: true, force: true })
})

describe.skipIf(cannotBoot !== null)(
  `a pulled OCI image under the krun driver (libkrun test double)${cannotBoot === null ? '' : ` (skipped: ${cannotBoot})`}`,
  () => {
    it('the krun driver shares the published rootfs as the guest image and the agent in VM mode runs with the image Env, WorkingDir and User', async () => {
      const base = await new ImageStore().resolve('base')
      const app = plainLayer(
        await tarLayer([
          { name: 'etc/passwd', content: PASSWD },
          { name: 'home/app/', type: 'directory', uid: 1000, gid: 1000 },
          { name: 'srv/app/', type: 'directory', uid: 1000, gid: 1000 },
          { name: 'srv/app/marker', content: 'from the pulled image' },
        ]),
      )
      await pushImage(registry, 'krun/app', '1', [gzipLayer(tarDirectory(base.rootfs)), app], {
        env: ['GREETING=from-image', 'PATH=/usr/local/bin:/usr/bin:/bin'],
        workingDir: '/srv/app',
        user: 'app',
      })
      const ref = `${registry.host}/krun/app:1`
      const cacheDir = path.join(work, 'cache')
      const image = await new ImageStore({ cacheDir }).pull(ref)
      const log = path.join(work, 'calls.jsonl')
      fs.writeFileSync(log, '', { mode: 0o666 })
      fs.chmodSync(log, 0o666)
      process.env.KRUN_DOUBLE_LOG = log

      const rt = new Runtime({ stateDir: path.join(work, 'state'), cacheDir })
      try {
        const sb = await rt.create({ driver: 'krun', image: ref, env: { CALLER: 'caller' } })
        expect(sb.driver).toBe('krun')
        const r = await sb.exec('sh', ['-c', 'echo "$GREETING $CALLER"; pwd; id -u; echo $HOME; cat marker'])
        expect(r.stdout).toBe('from-image caller\n/srv/app\n1000\n/home/app\nfrom the pulled image')
        // The guest's boot root is the sandbox's boot dir; the image share is the published rootfs.
        const calls = readDoubleLog(log)
        const root = calls.find((c) => c.call === 'krun_set_root')
        expect(root).toMatchObject({ root_path: asRoot ? stagedPaths(5)[0] : path.join(work, 'state', sb.id, 'boot') })
        const share = calls.find((c) => c.call === 'krun_add_virtiofs3' && c.c_tag === KRUN_IMAGE_TAG)
        expect(share).toMatchObject({ c_path: asRoot ? stagedPaths(5)[2] : image.rootfs, read_only: true })
        const guest = calls.find((c) => c.call === 'krun_start_enter')?.guest as DoubleGuest
        expect(guest.shares[KRUN_IMAGE_TAG]).toMatchObject({ readOnly: true })
        expect(guest.pid1).toBe(true)
        expect(guest.env).toContain('KRUNBOX_BOOT=vm')
        // The same rootfs a namespace sandbox boots: one published copy, no second unpack for the VM.
        expect(new Set((await new ImageStore({ cacheDir }).list()).map((i) => i.id))).toEqual(new Set([image.id]))
        const ns = await rt.create({ driver: 'namespace', image: ref })
        expect((await ns.exec('cat', ['marker'])).stdout).toBe('from the pulled image')
        await Promise.all([sb.stop(), ns.stop()])
      } finally {
        await rt.close()
      }
    }, 180_000)
  },
)
