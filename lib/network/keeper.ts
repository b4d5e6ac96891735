/**
 * A detached sandbox's network outlives the process that created it. Its resolver, proxy and
 * pasta live in a small Node process of their own (the CLI, run as `__keep-network`), which
 * ends when the sandbox's PID 1 does (coreutils `tail --pid` waits for it), or when pasta
 * does. A SIGKILL of the keeper takes pasta along (parent-death signal), so the sandbox is left
 * with no way out, never an unfiltered one.
 *
 * Refusals are counted in `network-usage.json` in the sandbox's state directory, which any
 * process may read; `network-denied` events go to the process that holds the network, so a
 * detached sandbox has none. They are logged in `network-keeper.log`, rate-limited and capped.
 */
import { spawn } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { readTail } from '../drivers/tail.js'
import { packageRoot } from '../paths.js'
import { DenialLog } from './denial-log.js'
import { SandboxNetwork } from './gateway.js'
import { attachPasta } from './pasta.js'
import type { NetworkPolicy } from './policy.js'

export const KEEPER_VERB = '__keep-network'
const USAGE_FILE = 'network-usage.json'
const READY = 'ready'

interface KeeperParams {
  policy: NetworkPolicy
  cap: NetworkPolicy | null
  /** The sandbox's PID 1 on the host, whose network namespace pasta joins. */
  targetPid: number
  sandboxDir: string
  timeoutMs: number
}

/** Starts the keeper for a booted sandbox and returns once pasta has joined it. */
export async function startNetworkKeeper(params: KeeperParams): Promise<SandboxNetwork> {
  const cli = path.join(packageRoot, 'dist', 'cli.js')
  if (!fs.existsSync(cli)) throw new Error(`a detached sandbox's network is kept by ${cli}, which is missing (run the build)`)
  // The parameters (a policy can be long) travel in a private file beside the sandbox state.
  const paramFile = path.join(params.sandboxDir, `keeper-${crypto.randomBytes(8).toString('hex')}.json`)
  fs.writeFileSync(paramFile, JSON.stringify(params), { mode: 0o600 })
  const logFile = path.join(params.sandboxDir, 'network-keeper.log')
  const stderr = fs.openSync(logFile, 'a')
  let keeper
  try {
    keeper = spawn(process.execPath, [cli, KEEPER_VERB, paramFile], { detached: true, stdio: ['ignore', 'pipe', stderr] })
  } finally {
    fs.closeSync(stderr)
  }
  const stdout = keeper.stdout!
  try {
    await new Promise<void>((resolve, reject) => {
      let out = ''
      const timer = setTimeout(() => reject(new Error(`the network keeper was not ready within ${params.timeoutMs} ms`)), params.timeoutMs)
      stdout.on('data', (d: Buffer) => {
        out += d.toString()
        if (out.includes(`${READY}\n`)) {
          clearTimeout(timer)
          resolve()
        }
      })
      keeper.once('exit', (code, signal) => {
        clearTimeout(timer)
        reject(new Error(`the network keeper exited (${signal ?? code}): ${readTail(logFile)}`))
      })
      keeper.once('error', (err) => {
        clearTimeout(timer)
        reject(err)
      })
    })
  } catch (err) {
    keeper.kill('SIGKILL')
    fs.rmSync(paramFile, { force: true })
    throw err
  }
  stdout.destroy()
  keeper.removeAllListeners()
  keeper.unref()
  return SandboxNetwork.kept(() => readUsage(params.sandboxDir))
}

/** The keeper process: the CLI runs this for KEEPER_VERB. Resolves when the sandbox's network is gone. */
export async function keepNetwork(paramFile: string): Promise<void> {
  const params = JSON.parse(fs.readFileSync(paramFile, 'utf8')) as KeeperParams
  fs.rmSync(paramFile, { force: true })
  const network = await SandboxNetwork.start(params.policy, params.cap)
  const pasta = await attachPasta({ targetPid: params.targetPid, ports: network, sandboxDir: params.sandboxDir, timeoutMs: params.timeoutMs }).catch(async (err) => {
    await network.close()
    throw err
  })
  const usageFile = path.join(params.sandboxDir, USAGE_FILE)
  const record = () => {
    // Through a rename: a reader never sees half a file. Gone with the state directory: fine.
    try {
      fs.writeFileSync(`${usageFile}.tmp`, JSON.stringify(network.usage()))
      fs.renameSync(`${usageFile}.tmp`, usageFile)
    } catch {}
  }
  record()
  // Its stderr is network-keeper.log: refusals go there, bounded (denial-log.ts).
  const log = new DenialLog(2)
  network.on('denied', (denial) => {
    record()
    log.record(denial)
  })
  network.on('allowed', record)
  // pasta holds the sandbox's network namespace open, so it does not end with the sandbox.
  const watcher = spawn('tail', [`--pid=${params.targetPid}`, '-f', '/dev/null'], { stdio: 'ignore' })
  const sandboxGone = new Promise<void>((resolve) => {
    watcher.once('exit', () => resolve())
    watcher.once('error', () => resolve())
  })
  // READY once the watcher has exec'd: until then a fork of this process carries its command line.
  await new Promise<void>((resolve) => {
    watcher.once('spawn', resolve)
    watcher.once('error', () => resolve())
  })
  process.stdout.write(`${READY}\n`)
  await Promise.race([sandboxGone, pasta.exited])
  pasta.kill('SIGKILL')
  log.close()
  await network.close()
}

function readUsage(sandboxDir: string): { allowed: number; denied: number } {
  try {
    const u = JSON.parse(fs.readFileSync(path.join(sandboxDir, USAGE_FILE), 'utf8'))
    if (Number.isSafeInteger(u.allowed) && Number.isSafeInteger(u.denied)) return { allowed: u.allowed, denied: u.denied }
  } catch {}
  return { allowed: 0, denied: 0 }
}
