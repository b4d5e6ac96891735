/**
 * The public types that show wire data are the contract's generated ones (or derived from them),
 * and stay what callers compiled against: each equals the hand-written shape it replaced. The
 * checks are type-level (tsc --noEmit over test/ fails on a difference); the run checks that the
 * contract carries the docs those types show.
 */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, expectTypeOf, it } from 'vitest'
import type { CommandSnapshot, CommandUsage, SandboxAgentInfo, SandboxService } from '../../lib/index.js'
import type { AgentConfig } from '../../lib/drivers/types.js'
import type { AgentHello } from '../../lib/protocol/client.js'

/** CommandSnapshot as lib/command-snapshot.ts spelled it out by hand. */
interface HandCommandSnapshot {
  id: string
  argv: string[]
  status: 'queued' | 'starting' | 'running' | 'exited' | 'failed' | 'canceled' | 'timed_out' | 'killed'
  pid: number | null
  exitCode: number | null
  signal: string | null
  timedOut: boolean
  timeoutMs: number | null
  startedAt: number | null
  endedAt: number | null
  durationMs: number | null
  cancelMode: 'graceful' | 'force' | null
  canceledAt: number | null
  terminationSignal: string | null
  killedReason: 'sandbox_destroyed' | null
  failReason: string | null
  stdoutTruncated: boolean
  stderrTruncated: boolean
  firstSeq: number
  nextSeq: number
  usage: CommandUsage | null
}

/** SandboxAgentInfo as lib/sandbox.ts spelled it out by hand. */
interface HandSandboxAgentInfo {
  sandboxId: string
  image: string
  imageVersion: string
  startedAt: number
  expiresAt: number | null
  idleTimeoutMs: number
  lastActivityAt: number
  activeCommands: number
  paused: boolean
  status: 'running' | 'paused' | 'stopping'
  services: SandboxService[]
}

/** The agent's boot configuration as lib/drivers/types.ts mirrored agent/config by hand. */
interface HandAgentConfig {
  mode: 'namespace' | 'vm'
  sandboxId: string
  image: string
  imageVersion: string
  listenPath?: string
  vsockPort?: number
  lowerDir: string
  layerDir?: string
  upperSizeMb: number
  tokenSha256: string
  idleTimeoutMs: number
  expiresAt: number
  maxExpiresAt: number
  maxIdleTimeoutMs: number
  env: Record<string, string>
  pidsMax: number
  workspace: string
  user?: string
  capabilities?: string[]
  artifacts?: { paths: string[]; maxBytes: number; when: string }
  resolvConf?: string
}

describe('public wire types', () => {
  it('are the shapes callers compiled against', () => {
    expectTypeOf<CommandSnapshot>().toEqualTypeOf<HandCommandSnapshot>()
    expectTypeOf<SandboxAgentInfo>().toEqualTypeOf<HandSandboxAgentInfo>()
    expectTypeOf<AgentHello>().toEqualTypeOf<{
      version: number
      agent: string
      sandboxId: string
      pid: number
      features: string[]
    }>()
    // The boot configuration gained the fields the drivers added beside the mirror (the listening
    // socket and workload leaf the namespace driver hands on, a network policy's relay and its handoff channel).
    expectTypeOf<Omit<AgentConfig, 'listenFd' | 'workloadCgroup' | 'egress'>>().toEqualTypeOf<HandAgentConfig>()
    expectTypeOf<AgentConfig['egress']>().toEqualTypeOf<
      | { proxyPort: number; dnsPort: number; handoffFd?: number; hostLoopback: { net: string; port: number }[] }
      | undefined
    >()
  })

  it('carry their docs from the contract', () => {
    const gen = fs.readFileSync(path.resolve(import.meta.dirname, '../../lib/protocol/contract.gen.ts'), 'utf8')
    expect(gen).toMatch(/\/\*\* The command's deadline; null: it has none[^*]*\*\/\n {2}timeoutMs: number \| null/)
    expect(gen).toMatch(
      /\/\*\* When the TTL ends the sandbox; null without a TTL\. \*\/\n {2}expiresAt: number \| null/,
    )
  })
})
