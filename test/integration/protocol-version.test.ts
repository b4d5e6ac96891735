/**
 * Version negotiation with a real booted agent: the fake agent of test/fixtures/fake-agent,
 * built as an agent of protocol version 2 that ignores the host's offer, is refused (S201
 * under the boot's S305), and the sandbox leaves nothing behind. (The real agent's choice from
 * the host's list: agent/server_test.go TestHandshakeVersionList.)
 */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import { PROTOCOL_VERSIONS } from '../../lib/protocol/contract.gen.js'
import type { Runtime } from '../../lib/runtime.js'
import { processesLeft, processesMentioning, testRuntime } from '../helpers/runtime.js'

let rt: Runtime
let buildDir: string

beforeAll(() => {
  buildDir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-fake-agent-v2-'))
  execFileSync('go', ['build', '-ldflags', '-X main.helloVersion=2', '-o', path.join(buildDir, 'fake-agent'), '.'], {
    cwd: path.join(import.meta.dirname, '..', 'fixtures', 'fake-agent'),
    env: { ...process.env, CGO_ENABLED: '0' },
    stdio: 'inherit',
  })
  rt = testRuntime()
})

afterAll(async () => {
  await rt?.close()
  fs.rmSync(buildDir, { recursive: true, force: true })
})

describe('protocol version negotiation', () => {
  it('refuses an agent of another protocol version with S201 and leaves nothing running', async () => {
    const before = process.env.KRUNBOX_AGENT_PATH
    process.env.KRUNBOX_AGENT_PATH = path.join(buildDir, 'fake-agent')
    let err: unknown
    try {
      err = await rt.create({ image: 'base', driver: 'namespace' }).then(
        () => null,
        (e) => e,
      )
    } finally {
      if (before === undefined) delete process.env.KRUNBOX_AGENT_PATH
      else process.env.KRUNBOX_AGENT_PATH = before
    }
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
})
