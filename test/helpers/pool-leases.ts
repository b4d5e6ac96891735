/** Leases of a reuse pool's one member, each checked to be that member, for the pool-reuse attack tests. */
import { execFileSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { expect } from 'vitest'
import type { CreateOptions } from '../../lib/create-options.js'
import type { SandboxPool } from '../../lib/pool.js'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'

export class PoolLeases {
  /** Leases not stopped yet: stopAll() ends them (a failed test must not keep the one member leased). */
  readonly #live: Sandbox[] = []

  constructor(
    readonly rt: Runtime,
    readonly pool: SandboxPool,
    readonly shape: CreateOptions,
  ) {}

  /** A lease of a ready member, waited for while the pool has none (failing once a reset failed). */
  async lease(): Promise<Sandbox> {
    while (this.pool.stats.ready === 0) {
      if (this.pool.stats.resetFailures > 0) throw new Error('a reset failed')
      await new Promise((resolve) => this.pool.once('member', resolve))
    }
    const hits = this.pool.stats.hits
    const sb = await this.rt.acquire(this.shape)
    this.#live.push(sb)
    expect(this.pool.stats.hits).toBe(hits + 1)
    return sb
  }

  /** The next lease of the same sandbox (a pool of one member boots no other while it is leased). */
  async next(previous: Sandbox): Promise<Sandbox> {
    const before = this.pool.stats.reuses
    expect(await previous.stop()).toEqual({ sandboxId: previous.id, stopped: true })
    expect(previous.status).toBe('destroyed')
    const sb = await this.lease()
    expect(this.pool.stats.reuses).toBe(before + 1)
    expect(sb.id).toBe(previous.id)
    expect(sb).not.toBe(previous)
    return sb
  }

  async stopAll(): Promise<void> {
    for (const sb of this.#live.splice(0)) if (sb.status !== 'destroyed') await sb.stop().catch(() => {})
  }
}

/** A C fixture built static on the host (it runs in any image), as bytes to write into a sandbox. */
export function staticProgram(source: string): Buffer {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-static-'))
  try {
    execFileSync('cc', ['-static', '-O1', '-o', path.join(dir, 'program'), source])
    return fs.readFileSync(path.join(dir, 'program'))
  } finally {
    fs.rmSync(dir, { recursive: true, force: true })
  }
}
