/**
 * The handshake with a booted fake agent (test/fixtures/fake-agent). Built as an agent of
 * protocol version 2 that ignores the host's offer, it is refused (S201 under the boot's S305),
 * and the sandbox leaves nothing behind. (The real agent's choice from the host's list:
 * agent/server_test.go TestHandshakeVersionList.) Built as a slow boot, it finds the host's
 * connection already waiting on the socket the host made for it.
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import { PROTOCOL_VERSIONS } from '../../lib/protocol/contract.gen.js'
import { runtimeState, type Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { processesLeft, testRuntime } from '../helpers/runtime.js'

let rt: Runtime
let buildDir: string

/** The fake agent of test/fixtures/fake-agent, built with `ldflags` as `name`. */
function buildFake(name: string, ldflags: string): string {
  const file = path.join(buildDir, name)
  execFileSync('go', ['build', '-ldflags', ldflags, '-o', file, '.'], {
    cwd: path.join(import.meta.dirname, '..', 'fixtures', 'fake-agent'),
    env: { ...process.env, CGO_ENABLED: '0' },
    stdio: 'inherit',
  })
  return file
}

/** create() with `agent` as the sandbox's PID 1: the sandbox, or what it rejected with. */
async function createWith(agent: string): Promise<Sandbox | unknown> {
  const before = process.env.KRUNBOX_AGENT_PATH
  process.env.KRUNBOX_AGENT_PATH = agent
  try {
    return await rt.create({ image: 'base', driver: 'namespace' }).catch((e: unknown) => e)
  } finally {
    if (before === undefined) delete process.env.KRUNBOX_AGENT_PATH
    else process.env.KRUNBOX_AGENT_PATH = before
  }
}

beforeAll(() => {
  buildDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-fake-agent-v2-'))
  rt = testRuntime()
})

afterAll(async () => {
  await rt?.close()
  fs.rmSync(buildDir, { recursive: true, force: true })
})

describe('protocol version negotiation', () => {
  it('refuses an agent of another protocol version with S201 and leaves nothing running', async () => {
    const err = await createWith(buildFake('fake-agent-v2', '-X main.helloVersion=2'))
    expect(err).toBeInstanceOf(SandboxError)
    // The boot reports a handshake that did not complete; its cause says why.
    expect((err as SandboxError).code).toBe('S305')
    const cause = (err as SandboxError).cause as SandboxError
    expect(cause).toBeInstanceOf(SandboxError)
    expect(cause.code).toBe('S201')
    expect(cause.message).toContain('version 2')
    expect(cause.message).toContain(`host offered ${PROTOCOL_VERSIONS.join(', ')}`)
    const id = /sandbox (\S+) booted/.exec((err as SandboxError).message)?.[1]
    expect(id).toBeTruthy()
    expect(await processesLeft(id!)).toEqual([])
  })

  it("sends its HELLO while the agent boots: the connection waits in the socket's queue, and the handshake completes", async () => {
    const sb = (await createWith(buildFake('fake-agent-slow', '-X main.readyDelay=300ms'))) as Sandbox
    try {
      expect(sb.status).toBe('ready')
      expect(fs.readFileSync(path.join(runtimeState(rt).sandboxDir(sb.id), 'stderr.log'), 'utf8')).toContain(
        'queued before READY',
      )
    } finally {
      await sb.stop()
    }
  })
})
