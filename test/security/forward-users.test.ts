/**
 * forward() listens on the host's 127.0.0.1, where every local user can
 * connect. It carries only connections of this process's own user to the sandbox (as the
 * sandbox's proxy serves only its own), unless the caller opens it with allowOtherUsers.
 * (Issue 28, item 10.)
 */
import { execFile } from 'node:child_process'
import net from 'node:net'
import { promisify } from 'node:util'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { asRoot, NOBODY } from '../helpers/rootless.js'
import { testRuntime } from '../helpers/runtime.js'

const SANDBOX_PORT = 7411
let rt: Runtime
let sb: Sandbox

beforeAll(async () => {
  rt = testRuntime()
  sb = await rt.create({ image: 'base', driver: 'namespace' })
  // A service in the sandbox that gives every client its secret.
  sb.start('sh', ['-c', `while :; do echo SANDBOX-SECRET | nc -l -p ${SANDBOX_PORT}; done`])
  // It listens a moment after it starts: S230 (nothing listening yet) is asked again.
  for (let attempt = 0; ; attempt++) {
    try {
      const s = await sb.connect(SANDBOX_PORT)
      s.resume()
      await new Promise((resolve) => s.once('close', resolve))
      return
    } catch (err) {
      if (!(err instanceof SandboxError && err.code === 'S230') || attempt > 500) throw err
    }
  }
})
afterAll(async () => {
  await sb.stop()
  await rt.close()
})

/** Connects to 127.0.0.1:port from this process: all it got before the close. */
function fetchOwn(port: number): Promise<string> {
  return new Promise((resolve) => {
    let got = ''
    const s = net.connect(port, '127.0.0.1')
    s.on('data', (d) => (got += d))
    s.on('error', () => {})
    s.on('close', () => resolve(got))
  })
}

/** The same from a child running as nobody. */
async function fetchAsNobody(port: number): Promise<string> {
  const script = `
    let got = ''
    const s = require('net').connect(${port}, '127.0.0.1')
    s.on('data', (d) => (got += d))
    s.on('error', () => {})
    s.on('close', () => console.log(JSON.stringify(got)))
  `
  const { stdout } = await promisify(execFile)(
    'setpriv',
    ['--reuid', String(NOBODY), '--regid', String(NOBODY), '--clear-groups', process.execPath, '-e', script],
    { timeout: 60_000 },
  )
  return JSON.parse(stdout)
}

describe('forward()', () => {
  it.skipIf(!asRoot)('forward: a connection from another local user is refused; its own user is served', async () => {
    const forward = await sb.forward(SANDBOX_PORT)
    try {
      expect(await fetchAsNobody(forward.port)).toBe('')
      expect(await fetchOwn(forward.port)).toBe('SANDBOX-SECRET\n')
    } finally {
      await forward.close()
    }
  })

  it.skipIf(!asRoot)("forward: allowOtherUsers opens it to every local user, by the caller's choice", async () => {
    const forward = await sb.forward(SANDBOX_PORT, { allowOtherUsers: true })
    try {
      expect(await fetchAsNobody(forward.port)).toBe('SANDBOX-SECRET\n')
    } finally {
      await forward.close()
    }
  })

  it('forward: a bad allowOtherUsers is S001 naming it', async () => {
    await expect(sb.forward(SANDBOX_PORT, { allowOtherUsers: 'yes' as never })).rejects.toMatchObject({
      code: 'S001',
      message: expect.stringContaining('allowOtherUsers'),
    })
  })
})
