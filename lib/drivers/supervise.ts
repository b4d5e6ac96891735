/**
 * Spawns and supervises one sandbox process (bwrap or krun-shim): its own session and
 * process group, a parent-death signal unless detached, stderr to a file (its tail explains
 * boot failures), stdout as a pipe on which the agent announces READY.
 * INTERIM: child_process until the native spawner lands.
 */
import { spawn } from 'node:child_process'
import fs from 'node:fs'
import type { ProcessExit } from './types.js'

export interface SuperviseOptions {
  file: string
  args: string[]
  stderrFile: string
  cgroupProcs: string[]
  dieWithParent: boolean
  env?: Record<string, string>
  extraFds?: number[]
}

export interface SupervisedProcess {
  pid: number
  exited: Promise<ProcessExit>
  kill(signal: NodeJS.Signals): void
  /** Resolves when the process prints this line on stdout; rejects on exit or after timeoutMs. */
  waitForLine(line: string, timeoutMs: number): Promise<void>
}

export function spawnSupervised(options: SuperviseOptions): SupervisedProcess {
  const stderrFd = fs.openSync(options.stderrFile, 'a', 0o600)
  const child = spawn(options.file, options.args, {
    stdio: ['ignore', 'pipe', stderrFd],
    detached: true,
    env: options.env ?? {},
  })
  fs.closeSync(stderrFd)
  for (const f of options.cgroupProcs) {
    try {
      fs.writeFileSync(f, String(child.pid))
    } catch {}
  }
  const exited = new Promise<ProcessExit>((resolve) => {
    child.once('exit', (code, signal) => resolve({ exitCode: code, signal }))
  })
  child.unref()
  return {
    pid: child.pid!,
    exited,
    kill(signal) {
      try {
        process.kill(child.pid!, signal)
      } catch {}
    },
    waitForLine(line, timeoutMs) {
      return new Promise((resolve, reject) => {
        let seen = ''
        const timer = setTimeout(() => done(new Error(`no ${line} from the sandbox within ${timeoutMs} ms`)), timeoutMs)
        const onData = (chunk: Buffer) => {
          seen += chunk.toString('utf8')
          if (seen.split('\n').includes(line)) done(null)
        }
        const onExit = (code: number | null, signal: string | null) =>
          done(new Error(`sandbox process exited before it was ready (exit code ${code}, signal ${signal})`))
        const done = (err: Error | null) => {
          clearTimeout(timer)
          child.stdout!.removeListener('data', onData)
          child.removeListener('exit', onExit)
          child.stdout!.destroy()
          if (err) reject(err)
          else resolve()
        }
        child.stdout!.on('data', onData)
        child.once('exit', onExit)
      })
    },
  }
}
