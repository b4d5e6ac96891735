/**
 * Detached sandboxes' networks outlive the process that created them. One keeper process per
 * state directory (the CLI run as `__keep-network <dir>`) holds the host side of every
 * detached sandbox of that directory: a resolver and a proxy each (gateway.ts), on the
 * sandbox's own sockets. The first detached create with a policy starts it; the next ones
 * register with it over its socket (`.network-keeper/keeper.sock`, 0600: this user's only) and
 * cost one round trip, while the agent boots. Each first sends it the host end of the sandbox's
 * proxy handoff (proxy-handoff.ts) over `handoff.sock` (0600 too), so the keeper accepts the
 * sandbox's proxy connections on the listener the relay hands over, as an attached sandbox's host
 * does. It lets go of a sandbox when the sandbox's bwrap
 * (which lives as long as its PID 1) ends, and exits when it holds none. A SIGKILL of the
 * keeper closes every socket and listener it holds: the proxy ports then refuse, the relays'
 * connects fail, and the sandboxes reach nothing, never something unfiltered.
 *
 * Refusals are counted in `network-usage.json` in the sandbox's state directory, which any
 * process may read; `network-denied` events go to the process that holds the network, so a
 * detached sandbox has none. They are logged in its `network-keeper.log`, rate-limited and capped.
 */
import { spawn } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { readTail } from '../drivers/tail.js'
import { acceptFd, fsBatch, sendFdTo } from '../native.js'
import { packageRoot } from '../paths.js'
import { DenialLog } from './denial-log.js'
import { listenPrivate } from './egress-socket.js'
import { SandboxNetwork, type NetworkPlace } from './gateway.js'
import type { NetworkPolicy } from './policy.js'

export const KEEPER_VERB = '__keep-network'
const USAGE_FILE = 'network-usage.json'
/** Room for both counts at their largest (2^53), padded with spaces. */
const USAGE_BYTES = 64
const KEEPER_DIR = '.network-keeper'
const SOCKET = 'keeper.sock'
/** Where a create sends the host end of its sandbox's proxy handoff, with the sandbox's directory as its bytes. */
const HANDOFF_SOCKET = 'handoff.sock'
/** A handoff end no registration took within this is closed. */
const HANDOFF_UNCLAIMED_MS = 30_000
/** A secret of this user's: names the keeper's lock, which another user therefore cannot take first. */
const LOCK_NAME_FILE = 'lock-name'
const REGISTRATION_MAX = 1024 * 1024
/** How often the keeper looks for sandboxes whose bwrap has ended (coreutils `tail --pid` polls too). */
const SWEEP_MS = 1_000
const IDLE_SWEEPS_TO_EXIT = 5

interface Registration {
  policy: NetworkPolicy
  cap: NetworkPolicy | null
  place: NetworkPlace
  /** The sandbox's bwrap on the host (it lives as long as the sandbox): the keeper lets go of the sandbox when it ends. */
  targetPid: number
  sandboxDir: string
}

/** The keeper's directory for sandboxes in `<state>/<id>`: `<state>/.network-keeper`. */
export function keeperDir(sandboxDir: string): string {
  return path.join(path.dirname(sandboxDir), KEEPER_DIR)
}

/**
 * Hands a booted detached sandbox's network to the keeper of its state directory (started if
 * none runs), with `handoffEnd` (the host end of its proxy handoff; the caller still closes its
 * own), which goes to handoff.sock before the registration does.
 */
export async function startNetworkKeeper(
  params: Registration & { timeoutMs: number; handoffEnd: number },
): Promise<SandboxNetwork> {
  const dir = keeperDir(params.sandboxDir)
  const { timeoutMs, handoffEnd, ...registration } = params
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const sent = sendHandoff(dir, handoffEnd, params.sandboxDir)
    const reply = sent ? await register(dir, registration, deadline - Date.now()) : null
    if (reply === 'ready') return SandboxNetwork.kept(() => readUsage(params.sandboxDir))
    if (reply !== null) throw new Error(`the network keeper refused the sandbox: ${reply}`)
    if (Date.now() >= deadline) throw new Error(`the network keeper was not reachable within ${timeoutMs} ms`)
    // No keeper (or one that was exiting): start one. It says "exists" at once when another
    // holds the lock (started by another create, and listening or about to).
    await spawnKeeper(dir, deadline - Date.now())
  }
}

/** Whether a keeper's handoff.sock took the end (no keeper listening: false). */
function sendHandoff(dir: string, end: number, sandboxDir: string): boolean {
  try {
    sendFdTo(path.join(dir, HANDOFF_SOCKET), end, Buffer.from(sandboxDir))
    return true
  } catch {
    return false
  }
}

/** The keeper's answer, or null when no keeper took the registration. */
function register(dir: string, registration: Registration, timeoutMs: number): Promise<string | null> {
  return new Promise((resolve) => {
    const socket = net.connect(path.join(dir, SOCKET))
    let got = ''
    const timer = setTimeout(() => socket.destroy(), Math.max(timeoutMs, 1))
    socket.on('connect', () => socket.write(JSON.stringify(registration) + '\n'))
    socket.on('data', (d) => {
      got += d
      if (got.includes('\n')) socket.end()
    })
    socket.on('error', () => {})
    socket.on('close', () => {
      clearTimeout(timer)
      resolve(got.includes('\n') ? got.slice(0, got.indexOf('\n')) : null)
    })
  })
}

async function spawnKeeper(dir: string, timeoutMs: number): Promise<void> {
  const cli = path.join(packageRoot, 'dist', 'cli.js')
  if (!fs.existsSync(cli))
    throw new Error(`a detached sandbox's network is kept by ${cli}, which is missing (run the build)`)
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 })
  const logFile = path.join(dir, 'keeper.log')
  const stderr = fs.openSync(logFile, 'a')
  let keeper
  try {
    keeper = spawn(process.execPath, [cli, KEEPER_VERB, dir], { detached: true, stdio: ['ignore', 'pipe', stderr] })
  } finally {
    fs.closeSync(stderr)
  }
  const stdout = keeper.stdout!
  try {
    await new Promise<void>((resolve, reject) => {
      let out = ''
      const timer = setTimeout(
        () => reject(new Error(`the network keeper was not ready within ${timeoutMs} ms`)),
        timeoutMs,
      )
      stdout.on('data', (d: Buffer) => {
        out += d.toString()
        if (out.includes('ready\n')) {
          clearTimeout(timer)
          resolve()
        }
      })
      keeper.once('exit', (code, signal) => {
        clearTimeout(timer)
        // "exists": another keeper holds the lock (and listens, or is about to); this one is gone.
        if (out.includes('exists\n')) resolve()
        else reject(new Error(`the network keeper exited (${signal ?? code}): ${readTail(logFile)}`))
      })
      keeper.once('error', (err) => {
        clearTimeout(timer)
        reject(err)
      })
    })
  } catch (err) {
    keeper.kill('SIGKILL')
    throw err
  }
  stdout.destroy()
  keeper.removeAllListeners()
  keeper.unref()
}

/** One sandbox the keeper holds. */
interface Held {
  network: SandboxNetwork
  log: DenialLog
  logFd: number
  usageFd: number
  pid: number
  /** Its start time: a pid reused by another process is not the sandbox. */
  started: string | null
}

/** The keeper process: the CLI runs this for KEEPER_VERB. Resolves once it holds no sandbox. */
export async function keepNetwork(dir: string): Promise<void> {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 })
  const lock = await takeLock(dir)
  if (!lock) {
    process.stdout.write('exists\n')
    return
  }
  const held = new Map<string, Held>()
  const handoffs = await handoffInbox(dir)
  let registering = 0
  let done!: () => void
  const finished = new Promise<void>((resolve) => (done = resolve))
  const server = net.createServer((socket) => {
    registering++
    socket.on('error', () => {})
    let line = ''
    const onData = (d: Buffer) => {
      line += d.toString('utf8')
      if (line.length > REGISTRATION_MAX) return void socket.destroy()
      if (!line.includes('\n')) return
      socket.off('data', onData)
      void Promise.resolve()
        .then(() => hold(JSON.parse(line.slice(0, line.indexOf('\n'))) as Registration))
        .then(
          () => socket.end('ready\n'),
          (err: Error) => socket.end(`${err.message.replace(/\n/g, ' ')}\n`),
        )
    }
    socket.on('data', onData)
    socket.once('close', () => registering--)
  })
  const hold = async (r: Registration) => {
    if (held.has(r.sandboxDir)) throw new Error(`${r.sandboxDir} is held already`)
    const network = await SandboxNetwork.start(r.policy, r.cap, r.place)
    try {
      await network.takeProxyListener(await handoffs.take(r.sandboxDir), HANDOFF_WAIT_MS)
    } catch (err) {
      await network.close()
      throw err
    }
    // One write in place per count, always USAGE_BYTES long (JSON ignores the padding): every
    // allowed request is counted, and a rename per request cost the keeper 0.3 ms of CPU each.
    const usageFd = fs.openSync(path.join(r.sandboxDir, USAGE_FILE), 'w', 0o644)
    const record = () => {
      try {
        fs.writeSync(usageFd, JSON.stringify(network.usage()).padEnd(USAGE_BYTES), 0)
      } catch {}
    }
    record()
    const logFd = fs.openSync(path.join(r.sandboxDir, 'network-keeper.log'), 'a')
    const log = new DenialLog(logFd)
    network.on('denied', (denial) => {
      record()
      log.record(denial)
    })
    network.on('allowed', record)
    held.set(r.sandboxDir, { network, log, logFd, usageFd, pid: r.targetPid, started: startTime(r.targetPid) })
  }
  const release = (key: string, h: Held) => {
    held.delete(key)
    h.log.close()
    for (const fd of [h.logFd, h.usageFd])
      try {
        fs.closeSync(fd)
      } catch {}
    void h.network.close().catch(() => {})
  }
  let idleSweeps = 0
  const sweep = setInterval(() => {
    handoffs.expire()
    for (const [key, h] of held) if (h.started === null || startTime(h.pid) !== h.started) release(key, h)
    idleSweeps = held.size === 0 && registering === 0 ? idleSweeps + 1 : 0
    // A few idle sweeps first: the create that started it registers right after "ready".
    if (idleSweeps >= IDLE_SWEEPS_TO_EXIT) {
      clearInterval(sweep)
      // Unlinked before the lock goes: a create that finds no socket starts a new keeper.
      fs.rmSync(path.join(dir, SOCKET), { force: true })
      handoffs.close()
      server.close(() => {
        lock.close()
        done()
      })
    }
  }, SWEEP_MS)
  await listenPrivate(server, path.join(dir, SOCKET), dir)
  process.stdout.write('ready\n')
  await finished
}

/** How long a registration waits for its handoff end and then for the relay's listener. */
const HANDOFF_WAIT_MS = 10_000

/**
 * The keeper's handoff.sock: the host ends of detached sandboxes' proxy handoffs, each named by
 * the sandbox directory its create sent with it, taken by that sandbox's registration.
 */
async function handoffInbox(dir: string) {
  const socketPath = path.join(dir, HANDOFF_SOCKET)
  // This keeper holds the lock: a file there is a dead keeper's.
  fs.rmSync(socketPath, { force: true })
  const [listener] = await fsBatch([{ op: 'listen', path: socketPath }])
  const waiting = new Map<string, { fd: number; at: number }>()
  return {
    /** The end sent for `sandboxDir` (sent before its registration, so waiting or about to be accepted). */
    async take(sandboxDir: string): Promise<number> {
      const deadline = Date.now() + HANDOFF_WAIT_MS
      for (;;) {
        const got = waiting.get(sandboxDir)
        if (got) {
          waiting.delete(sandboxDir)
          return got.fd
        }
        const left = deadline - Date.now()
        const next = left > 0 ? await acceptFd(listener, left) : null
        if (!next) throw new Error(`no proxy handoff came for ${sandboxDir} within ${HANDOFF_WAIT_MS} ms`)
        const key = next.data.toString('utf8')
        const stale = waiting.get(key)
        if (stale) fs.closeSync(stale.fd)
        waiting.set(key, { fd: next.fd, at: Date.now() })
      }
    },
    /** Closes ends no registration took. */
    expire() {
      for (const [key, w] of waiting)
        if (Date.now() - w.at > HANDOFF_UNCLAIMED_MS) {
          waiting.delete(key)
          fs.closeSync(w.fd)
        }
    },
    close() {
      fs.rmSync(socketPath, { force: true })
      for (const w of waiting.values()) fs.closeSync(w.fd)
      waiting.clear()
      fs.closeSync(listener)
    },
  }
}

/**
 * An abstract unix socket held for the keeper's life: released by the kernel when the keeper
 * ends, whatever way. Its name is a secret in the keeper's directory (this user's only), so no
 * other local user can take it first.
 */
async function takeLock(dir: string): Promise<net.Server | null> {
  const file = path.join(dir, LOCK_NAME_FILE)
  // Written whole, then linked into place: a keeper starting beside this one never reads it half-written.
  const draft = `${file}.${process.pid}`
  fs.writeFileSync(draft, crypto.randomBytes(16).toString('hex'), { mode: 0o600 })
  try {
    fs.linkSync(draft, file)
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err
  } finally {
    fs.rmSync(draft, { force: true })
  }
  const name = fs.readFileSync(file, 'utf8').trim()
  const lock = net.createServer((s) => s.destroy())
  return new Promise((resolve, reject) => {
    lock.once('error', (err: NodeJS.ErrnoException) => (err.code === 'EADDRINUSE' ? resolve(null) : reject(err)))
    lock.listen(`\0krunbox-network-keeper-${name}`, () => resolve(lock))
  })
}

/** Field 22 of /proc/<pid>/stat (its start time), or null when the process is gone. */
function startTime(pid: number): string | null {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8')
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null
  } catch {
    return null
  }
}

function readUsage(sandboxDir: string): { allowed: number; denied: number } {
  // A read that met the keeper's write in place halfway does not parse: read again.
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const u = JSON.parse(fs.readFileSync(path.join(sandboxDir, USAGE_FILE), 'utf8'))
      if (Number.isSafeInteger(u.allowed) && Number.isSafeInteger(u.denied))
        return { allowed: u.allowed, denied: u.denied }
    } catch {}
  }
  return { allowed: 0, denied: 0 }
}
