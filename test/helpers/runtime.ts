/** A runtime with a private state directory per test file; images come from the shared cache. */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll } from 'vitest'
import { Runtime, type RuntimeConfig, runtimeState } from '../../lib/runtime.js'

/** A Runtime whose close() also removes its temporary state directory. */
class TestRuntime extends Runtime {
  async close(): Promise<void> {
    await super.close()
    fs.rmSync(runtimeState(this).root, { recursive: true, force: true })
  }
}

export function testRuntime(config: RuntimeConfig = {}): Runtime {
  const stateDir = config.stateDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'kb-state-'))
  try {
    return new TestRuntime({ ...config, stateDir })
  } catch (err) {
    // A config the runtime refuses (a test of that) leaves no temporary directory behind.
    if (config.stateDir === undefined) fs.rmSync(stateDir, { recursive: true, force: true })
    throw err
  }
}

/** testRuntime() for a test file that makes several: every one is closed after the file's tests. */
export function runtimesClosedAfterAll(): (config?: RuntimeConfig) => Runtime {
  const runtimes: Runtime[] = []
  afterAll(async () => {
    await Promise.all(runtimes.map((r) => r.close()))
  })
  return (config = {}) => {
    const rt = testRuntime(config)
    runtimes.push(rt)
    return rt
  }
}

/**
 * What processesMentioning finds once it finds none, or after timeoutMs: a sandbox's end is
 * still finishing for a moment after the call that ended it (a killed process leaving /proc, the
 * reaper's last short steps, which name the sandbox's files); what is left after that is a leak.
 */
export async function processesLeft(text: string, timeoutMs = 5_000): Promise<number[]> {
  const deadline = Date.now() + timeoutMs
  let left = processesMentioning(text)
  while (left.length > 0 && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 20))
    left = processesMentioning(text)
  }
  return left
}

/** Host pids whose command line mentions the sandbox id (bwrap, agent, workload). */
export function processesMentioning(text: string): number[] {
  const out: number[] = []
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue
    try {
      const cmdline = fs.readFileSync(`/proc/${name}/cmdline`, 'utf8')
      const environ = fs.readFileSync(`/proc/${name}/environ`, 'utf8')
      if (cmdline.includes(text) || environ.includes(text)) out.push(Number(name))
    } catch {}
  }
  return out
}

/** Mount points on the host whose path mentions text. */
export function mountsMentioning(text: string): string[] {
  return fs
    .readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .filter((l) => l.includes(text))
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms))
}
