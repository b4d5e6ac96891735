/**
 * A krun boot never races the guest. libkrun (v1.19.0) accepts a host connection to
 * the agent's port at once, whether or not the guest listens, and when the guest refuses it,
 * keeps the accepted host fd open until its vsock reaper runs 5 s later (the libkrun double
 * models this: test/fixtures/libkrun-double/vsock_muxer.c, with the source lines). The agent
 * therefore says it listens (agent.listening in the control share) and the host connects only
 * then. Runs against the libkrun TEST DOUBLE, with its guest kernel "booting" for 100 ms before
 * init: no VM boots here, and nothing here proves one does.
 * (Issue 30.)
 */
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { AGENT_LISTENING_FILE } from '../../lib/drivers/krun.js'
import { SandboxError } from '../../lib/errors.js'
import { hostProbe } from '../../lib/probe.js'
import { encodeFrame, FrameType } from '../../lib/protocol/frame.js'
import { Runtime } from '../../lib/runtime.js'
import { libkrunDoublePath, libkrunfwDoubleDir } from '../fixtures/libkrun-double/index.js'
import { asRoot, checkoutUnreachable } from '../helpers/rootless.js'
import { SHARED_CACHE } from '../images/helpers.js'
import { ensureNativeBuilt, makeTempDir, until } from '../native/helpers.js'
import { restoreEnv } from '../helpers/env.js'

const doubleCannotBoot = asRoot ? checkoutUnreachable : null
const tmp = makeTempDir('krunbox-krun-ready-')
const savedEnv = { ...process.env }
let rt: Runtime

function useDouble(): void {
  process.env.KRUNBOX_KRUN_ASSUME_USABLE = '1'
  process.env.KRUNBOX_LIBKRUN_PATH = libkrunDoublePath
  process.env.LD_LIBRARY_PATH = libkrunfwDoubleDir
  for (const key of ['KRUN_DOUBLE_ENTER', 'KRUN_DOUBLE_VSOCK_HOLD_MS', 'KRUN_DOUBLE_KERNEL_BOOT_MS'])
    delete process.env[key]
}

beforeAll(() => {
  ensureNativeBuilt()
  fs.chmodSync(tmp.dir, 0o755)
  useDouble()
  hostProbe({ refresh: true })
  rt = new Runtime({ stateDir: path.join(tmp.dir, 'state'), cacheDir: SHARED_CACHE })
})
afterEach(() => {
  restoreEnv(savedEnv)
  useDouble()
})
afterAll(async () => {
  await rt?.close()
  restoreEnv(savedEnv)
  hostProbe({ refresh: true })
  tmp.cleanup()
})

/**
 * Connects to socketPath, sends a HELLO and resolves with what came back once the peer closes
 * (a reset: a unix socket closed with our HELLO unread resets, as libkrun's reaper's close does).
 */
function heldConnection(socketPath: string): Promise<{ bytes: number; ms: number }> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now()
    let bytes = 0
    const socket = net.createConnection(socketPath, () => {
      const hello = { versionMin: 0, versionMax: 0, client: 'krun-readiness-test' }
      socket.write(encodeFrame(0, FrameType.HELLO, 0, Buffer.from(JSON.stringify(hello))))
    })
    socket.on('data', (chunk: Buffer) => (bytes += chunk.length))
    socket.on('error', (err: NodeJS.ErrnoException) => {
      if (err.code !== 'ECONNRESET') reject(err)
    })
    socket.on('close', () => resolve({ bytes, ms: performance.now() - t0 }))
  })
}

describe.skipIf(doubleCannotBoot !== null)(
  `krun readiness under libkrun's 5 s hold (double)${doubleCannotBoot ? ` (skipped: ${doubleCannotBoot})` : ''}`,
  () => {
    it("the double holds a connection the guest refused for libkrun's 5 s, with no answer and no EOF before", async () => {
      // A guest kernel that takes 1 s to reach init: a connection made at once meets no listener,
      // and stays refused after the agent listens (libkrun released it; it does not retry).
      process.env.KRUN_DOUBLE_KERNEL_BOOT_MS = '1000'
      const sb = await rt.create({ driver: 'krun', wait: false, bootTimeoutMs: 30_000 })
      try {
        const socketPath = path.join(tmp.dir, 'state', sb.id, 'ctl', 'agent.sock')
        expect(await until(() => fs.existsSync(socketPath), 10_000)).toBe(true)
        const held = await heldConnection(socketPath)
        expect(held.bytes).toBe(0)
        expect(held.ms).toBeGreaterThanOrEqual(4900)
        // The host itself waited for the agent's word and then booted it.
        await sb.ready()
        expect(sb.status).toBe('ready')
      } finally {
        await sb.stop()
      }
    }, 30_000)

    it('bootTimeoutMs below the hold (4000) still boots: the host connects only once the agent listens, and leaves no listening file', async () => {
      // Before issue 30 the host's first connection came while the guest kernel booted, was held
      // 5 s, and this create always ended in S305.
      const sb = await rt.create({ driver: 'krun', bootTimeoutMs: 4000 })
      try {
        expect(sb.status).toBe('ready')
        expect((await sb.exec('echo', ['up'])).stdout).toBe('up\n')
        expect(fs.existsSync(path.join(tmp.dir, 'state', sb.id, 'ctl', AGENT_LISTENING_FILE))).toBe(false)
      } finally {
        await sb.stop()
      }
    })

    it('bootTimeoutMs 3000 with a guest that never reaches init ends in S305 naming the socket, and the host lives on', async () => {
      process.env.KRUN_DOUBLE_KERNEL_BOOT_MS = '600000'
      const sb = await rt.create({ driver: 'krun', wait: false, bootTimeoutMs: 3000 })
      const err = await sb.ready().then(
        () => null,
        (e: unknown) => e as SandboxError,
      )
      expect(err).toBeInstanceOf(SandboxError)
      expect(err!.code).toBe('S305')
      expect(err!.message).toContain('agent.sock')
      expect(sb.status).toBe('failed')
      // The runtime still serves.
      delete process.env.KRUN_DOUBLE_KERNEL_BOOT_MS
      const next = await rt.create({ driver: 'krun', bootTimeoutMs: 3000 })
      expect(next.status).toBe('ready')
      await next.stop()
    })
  },
)
