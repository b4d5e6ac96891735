/**
 * The krun driver: one libkrun microVM per sandbox, run by krun-shim (one host process per
 * VM, because krun_start_enter takes over its caller). The guest's root is a small boot
 * directory holding the agent; the image arrives read-only over virtio-fs; the agent listens
 * on a vsock port that libkrun exposes on the host as the unix socket `agent.sock`.
 *
 * There is no READY line in a VM. The agent creates `agent.listening` in the control share once
 * it listens on its vsock port, and only then does the host connect: libkrun accepts a host
 * connection at once whether or not the guest listens, and when the guest refuses it, holds it
 * open 5 s before closing it (libkrun#684). The wait races the shim's exit (whose boot error
 * arrives as JSON on its fd 4).
 *
 * The agent's configuration never rides the guest kernel command line (where libkrun puts the
 * environment: split at spaces and quotes, fatal on non-ASCII, cut at ~2 KiB, readable in
 * /proc/cmdline). It is config.json in a read-only share of its own, which the agent unmounts once
 * read and the host deletes once the agent answers. The command line carries only short ASCII
 * switches: KRUN_INIT_PID1=1 (the agent is PID 1, not a child of libkrun's init), KRUNBOX_BOOT=vm
 * and HOSTNAME.
 */
import fs from 'node:fs'
import fsp from 'node:fs/promises'
import net from 'node:net'
import path from 'node:path'
import { SandboxError } from '../errors.js'
import { loadNative } from '../native.js'
import { agentBinaryPath } from '../paths.js'
import { encodeFrame, FrameDecoder, FrameType } from '../protocol/frame.js'
import { createCgroups } from './cgroups.js'
import {
  encodeKrunShimConfig,
  krunShimBootErrorToSandboxError,
  parseKrunShimBootError,
  type KrunShimConfig,
} from './krun-shim-codec.js'
import { shimEnv } from './krun-shim-env.js'
import { assertKrunUsable } from './krun-usable.js'
import { ownForSandboxIds, sandboxIdMapping, stageBinds, type IdMapping } from './idmap.js'
import { subordinateIdMapping, type SubordinateMapping } from './subids.js'
import { spawnSupervised, type SupervisedProcess } from './supervise.js'
import { readTail } from './tail.js'
import type { AgentConfig, BootedSandbox, BootSpec, Driver, DriverCapabilities, ProcessExit } from './types.js'
import { KRUN_SHIM } from '../protocol/contract.gen.js'
import { errors } from '../protocol/errors.gen.js'

/** The guest port the agent listens on; libkrun forwards agent.sock to it. */
export const AGENT_VSOCK_PORT = KRUN_SHIM.agentVsockPort
/** Where the agent sits in the boot directory (the guest's root). */
export const GUEST_AGENT_PATH = '/krunbox-agent'
/**
 * The vCPUs a guest can use: libkrunfw 5's kernel is built with CONFIG_NR_CPUS=16, and boots
 * with 16 whatever more libkrun gives it (libkrun itself would take 254 on x86_64, 255 elsewhere).
 */
export const MAX_VCPUS = 16
/** sun_path holds 107 bytes and a NUL: a longer socket path cannot be bound (libkrun only warns) nor connected to. */
export const MAX_SOCKET_PATH_BYTES = 107
/** What the agent creates in the control share once it listens (agent/boot/vm_devices.go). */
export const AGENT_LISTENING_FILE = 'agent.listening'
/** What the agent reads from the boot-config share. */
const BOOT_CONFIG_FILE = 'config.json'
/** Host memory the VMM needs beyond the guest's RAM (kernel, device threads, virtio-fs). */
const VMM_MEMORY_OVERHEAD_MIB = 128
/** Host threads of the VMM (vCPUs, device workers) beyond the guest's own process limit. */
const VMM_THREAD_ALLOWANCE = 64
const POLL_MS = 5
/** How long to wait for the shim's boot report once it has exited. */
const REPORT_GRACE_MS = 500

export class KrunDriver implements Driver {
  readonly name = 'krun' as const
  readonly capabilities: DriverCapabilities = {
    agentMode: 'vm',
    // Booting a snapshot's layer needs it shared with the guest: not built yet (docs/pool-and-snapshots.md).
    fork: false,
    networkPolicy: {
      enforced: false,
      why: "libkrun's TSI reaches every destination",
      fix: "use network: false or driver: 'namespace'",
    },
    // The guest kernel owns every id; the VMM's user namespace maps only its root.
    hostIdsFromSubordinates: false,
    processExecutable: 'krun-shim',
    // The guest's root is the VM kernel's: the host cannot rebuild it from outside.
    resetForReuse: false,
  }

  assertUsable(): void {
    assertKrunUsable()
  }

  async boot(spec: BootSpec): Promise<BootedSandbox> {
    if (spec.cpus > MAX_VCPUS) {
      throw errors.outOfRange({
        field: 'cpus',
        allowed: `at most ${MAX_VCPUS} with the krun driver (libkrunfw 5's guest kernel: CONFIG_NR_CPUS=16)`,
        value: spec.cpus,
      })
    }
    const native = loadNative()
    const shimPath = native.krunShimPath()
    const agentPath = agentBinaryPath()
    const hostFiles = sandboxFiles(spec)
    const mapping = sandboxIdMapping()
    const subordinate = mapping ? null : await subordinateIdMapping()
    refuseLongSocketPath(hostFiles.socket)
    if (mapping) refuseLongSocketPath(stageFiles(hostFiles).files.socket)
    if (mapping) await ownForSandboxIds(mapping, spec.imageRootfs, spec.controlDir)
    // What the shim opens: on a root host staged where the sandbox's ids reach them (idmap.ts).
    const { files, staged } = mapping ? stageFiles(hostFiles) : { files: hostFiles, staged: undefined }
    const cgroups = await createCgroups(spec.id, {
      memoryMb: spec.memoryMb + VMM_MEMORY_OVERHEAD_MIB,
      cpus: spec.cpus,
      pidsMax: spec.pidsMax + VMM_THREAD_ALLOWANCE,
    })
    const removeHostState = async () => {
      await cgroups.remove()
      await Promise.all(
        [hostFiles.bootDir, hostFiles.bootConfigDir, hostFiles.socket].map((p) =>
          fsp.rm(p, { recursive: true, force: true }),
        ),
      )
    }

    // fd 3: the configuration (to EOF); fd 4: the boot-error report.
    const pipes: { readFd: number; writeFd: number }[] = []
    let child: SupervisedProcess
    try {
      pipes.push(native.pipe())
      pipes.push(native.pipe())
      prepareBootDir(hostFiles.bootDir, agentPath)
      writeBootConfig(hostFiles.bootConfigDir, spec)
      if (mapping) ownForSandbox(hostFiles, mapping)
      child = await spawnSupervised({
        file: shimPath,
        // The shim ignores its arguments; the id makes the VM's process findable (ps, leak checks).
        args: ['--sandbox-id', spec.id],
        env: shimEnv(),
        stderrFile: hostFiles.stderr,
        cgroupJoinFiles: cgroups.joinFiles,
        stagedBinds: staged,
        // With artifacts the VM outlives a dead host until the reaper's host-exit file makes the
        // agent archive them and end the VM (as in the namespace driver); else it dies at once.
        dieWithParent: !spec.detached && !spec.agent.artifacts,
        extraFds: [pipes[0].readFd, pipes[1].writeFd],
        // No READY line in a VM (see above); the guest console goes to a file.
        announcesReady: false,
      })
    } catch (err) {
      for (const p of pipes) {
        fs.closeSync(p.readFd)
        fs.closeSync(p.writeFd)
      }
      await removeHostState()
      throw err
    }
    const [configPipe, reportPipe] = pipes
    // The shim has its own copies of these ends now.
    fs.closeSync(configPipe.readFd)
    fs.closeSync(reportPipe.writeFd)
    const report = readToEnd(reportPipe.readFd)
    writeConfig(configPipe.writeFd, shimConfig(spec, files, mapping, subordinate))

    const tails = () => ({ stderrTail: readTail(hostFiles.stderr), consoleTail: readTail(hostFiles.console) })
    const ready = (async () => {
      const outcome = await waitForAgent(hostFiles, child.exited, spec.bootTimeoutMs)
      if (outcome.kind !== 'ready') {
        child.kill('SIGKILL')
        const exit = await child.exited
        const text = await Promise.race([report.text, delay(REPORT_GRACE_MS).then(() => '')])
        report.close()
        await removeHostState()
        throw bootFailure(spec, outcome.kind === 'timeout' ? null : exit, parseKrunShimBootError(text), tails())
      }
      await cgroups.booted()
      // Past krun_start_enter the shim reports nothing more on fd 4; the agent has read its config.
      report.close()
      fs.rmSync(hostFiles.bootConfigDir, { recursive: true, force: true })
      removeGuestMade(hostFiles.listening)
    })()
    ready.catch(() => {}) // the caller awaits it; unhandled until then is not an error
    return {
      pid: child.pid,
      socketPath: hostFiles.socket,
      // libkrun makes the socket when the VM's agent listens on its vsock port.
      listensEarly: false,
      exited: child.exited,
      kill: () => child.kill('SIGKILL'),
      limits: { enforced: cgroups.enforced, reason: cgroups.reason, cgroupPaths: cgroups.dirs },
      stderrTail: () => readTail(hostFiles.stderr),
      cleanup: removeHostState,
      ready,
    }
  }
}

interface SandboxFiles {
  bootDir: string
  bootConfigDir: string
  /** The image's root (shared read-only) and the control directory (shared read-write). */
  image: string
  control: string
  socket: string
  /** The agent's "I listen" signal (AGENT_LISTENING_FILE). */
  listening: string
  stderr: string
  console: string
}

function sandboxFiles({ sandboxDir, controlDir, imageRootfs }: BootSpec): SandboxFiles {
  return {
    bootDir: path.join(sandboxDir, 'boot'),
    bootConfigDir: path.join(sandboxDir, 'boot-config'),
    image: imageRootfs,
    control: controlDir,
    socket: path.join(controlDir, 'agent.sock'),
    listening: path.join(controlDir, AGENT_LISTENING_FILE),
    stderr: path.join(sandboxDir, 'stderr.log'),
    console: path.join(sandboxDir, 'console.log'),
  }
}

/**
 * A control socket path libkrun could not bind: it would only log a warning and the boot would
 * wait its whole timeout. Refused before anything starts, naming the path and the limit.
 */
function refuseLongSocketPath(socketPath: string): void {
  const bytes = Buffer.byteLength(socketPath)
  if (bytes <= MAX_SOCKET_PATH_BYTES) return
  throw errors.badRuntimeConfig({
    subject: `the krun control socket ${socketPath}`,
    problem: `is ${bytes} bytes long, and a unix socket path holds at most ${MAX_SOCKET_PATH_BYTES}: use a stateDir at most ${MAX_SOCKET_PATH_BYTES - (bytes - Buffer.byteLength(path.dirname(path.dirname(path.dirname(socketPath)))))} bytes long`,
  })
}

/**
 * The guest's root: the agent and the mount points it and libkrun's init use. A copy, not a
 * hard link: the root share is writable, and a guest must never reach the host's agent binary.
 */
function prepareBootDir(bootDir: string, agentPath: string): void {
  fs.mkdirSync(bootDir, { mode: 0o755 })
  for (const dir of ['dev', 'proc', 'sys', 'tmp', 'krunbox', 'krunbox-boot'])
    fs.mkdirSync(path.join(bootDir, dir), { mode: 0o755 })
  const target = path.join(bootDir, GUEST_AGENT_PATH)
  fs.copyFileSync(agentPath, target, fs.constants.COPYFILE_FICLONE)
  fs.chmodSync(target, 0o555)
}

/** The agent's configuration, alone in a directory shared read-only as `krunbox-boot`: any bytes travel. */
function writeBootConfig(dir: string, spec: BootSpec): void {
  // Typed as the contract's boot configuration: a field the agent would not read fails tsc.
  const agentConfig: AgentConfig = { ...spec.agent, mode: 'vm', vsockPort: AGENT_VSOCK_PORT, listenPath: undefined }
  fs.mkdirSync(dir, { mode: 0o700 })
  fs.writeFileSync(path.join(dir, BOOT_CONFIG_FILE), JSON.stringify(agentConfig), { mode: 0o400 })
}

/**
 * On a root host the shim opens its shares, socket and console as the sandbox's ids: the same
 * paths bound at STAGE_DIR/0.. in the shim's private mount namespace. The socket is created
 * inside the staged control directory, so it appears in the real one.
 */
function stageFiles(host: SandboxFiles): { files: SandboxFiles; staged: { dir: string; sources: string[] } } {
  const { binds, paths } = stageBinds([host.bootDir, host.bootConfigDir, host.image, host.control, host.console])
  const [bootDir, bootConfigDir, image, control, console] = paths
  const files = {
    ...host,
    bootDir,
    bootConfigDir,
    image,
    control,
    console,
    socket: path.join(control, path.basename(host.socket)),
  }
  return { files, staged: binds }
}

/** What the guest writes, or the VMM opens as the sandbox's root, belongs to that root (the control dir already does). */
function ownForSandbox(files: SandboxFiles, mapping: IdMapping): void {
  fs.writeFileSync(files.console, '', { mode: 0o600 })
  const root = mapping.hostRoot
  for (const file of [files.console, files.bootConfigDir, path.join(files.bootConfigDir, BOOT_CONFIG_FILE)])
    fs.chownSync(file, root, root)
  for (const entry of fs.readdirSync(files.bootDir, { recursive: true }) as string[])
    fs.lchownSync(path.join(files.bootDir, entry), root, root)
  fs.chownSync(files.bootDir, root, root)
}

/**
 * The guest's uid 0 as the host sees it (libkrun's virtio-fs reports host ids as they are, so
 * the VMM runs in a user namespace, as crun's krun handler does). On a root host: the sandbox
 * id range (idmap.ts), which the image is owned by. Rootless: the host user, and its
 * subordinate ids when it has them (written by newuidmap/newgidmap): an OCI image unpacked in
 * them (oci/userns.ts) then shows the guest its own owners, not the overflow id.
 */
function userNamespaceMaps(
  mapping: IdMapping | null,
  subordinate: SubordinateMapping | null,
): Pick<KrunShimConfig, 'uidMap' | 'gidMap' | 'newuidmap' | 'newgidmap'> {
  const lines = (map: string) => map.trim().split('\n')
  if (mapping) return { uidMap: lines(mapping.uidMap), gidMap: lines(mapping.gidMap) }
  if (subordinate) {
    const { uidMap, gidMap, helpers } = subordinate
    return { uidMap: lines(uidMap), gidMap: lines(gidMap), newuidmap: helpers.uid, newgidmap: helpers.gid }
  }
  const uid = process.getuid?.() ?? 0
  return { uidMap: [`0 ${uid} 1`], gidMap: [`0 ${process.getgid?.() ?? uid} 1`] }
}

function shimConfig(
  spec: BootSpec,
  files: SandboxFiles,
  mapping: IdMapping | null,
  subordinate: SubordinateMapping | null,
): KrunShimConfig {
  const config: KrunShimConfig = {
    cpus: spec.cpus,
    memoryMib: spec.memoryMb,
    rootDir: files.bootDir,
    imageDir: files.image,
    // The agent records why it ended (exit.json) and its activity here, as in namespace mode.
    ctlDir: files.control,
    agentPath: GUEST_AGENT_PATH,
    bootConfigDir: files.bootConfigDir,
    // The kernel command line (krun-shim checks each entry): nothing of the host's environment.
    env: ['KRUN_INIT_PID1=1', 'KRUNBOX_BOOT=vm', `HOSTNAME=${spec.hostname}`],
    ...userNamespaceMaps(mapping, subordinate),
    // The runtime refuses a network policy for krun (S111): TSI could not enforce it.
    network: false,
    // Warnings too (2): libkrun reports a failed socket bind only as one. RUST_LOG, passed
    // through by shimEnv(), overrides it (libkrun's env_logger reads it).
    logLevel: 2,
    vsockPort: AGENT_VSOCK_PORT,
    socketPath: files.socket,
    // The guest console (kernel and agent logs) goes to a file, never to a pipe nobody reads.
    consoleOutput: files.console,
  }
  const libkrunPath = process.env.KRUNBOX_LIBKRUN_PATH
  if (libkrunPath) config.libkrunPath = libkrunPath
  return config
}

/**
 * Removes what the guest made in the control share. Whatever it is (a directory, a link, a
 * tree the host cannot read), it is removed without being followed, and it never fails a boot.
 */
function removeGuestMade(file: string): void {
  try {
    fs.rmSync(file, { force: true, recursive: true })
  } catch {
    // Left for the sandbox's cleanup, which removes the whole state directory.
  }
}

/** One JSON object into fd 3, then EOF. A shim that died first shows up as its exit. */
function writeConfig(fd: number, config: KrunShimConfig): void {
  try {
    fs.writeSync(fd, encodeKrunShimConfig(config))
  } catch {
    // EPIPE: the shim is gone; its exit status and stderr say why.
  } finally {
    fs.closeSync(fd)
  }
}

/** Everything written to a pipe until EOF. Unreferenced: a running VM keeps fd 4 open. */
function readToEnd(fd: number): { text: Promise<string>; close(): void } {
  const socket = new net.Socket({ fd, readable: true, writable: false })
  const chunks: Buffer[] = []
  const text = new Promise<string>((resolve) => {
    socket.on('data', (chunk: Buffer) => chunks.push(chunk))
    socket.once('end', () => resolve(Buffer.concat(chunks).toString('utf8')))
    socket.once('close', () => resolve(Buffer.concat(chunks).toString('utf8')))
    socket.on('error', () => {})
  })
  socket.unref()
  return { text, close: () => socket.destroy() }
}

type Readiness = { kind: 'ready' } | { kind: 'exited' } | { kind: 'timeout' }

/**
 * Waits until the agent says it listens (its file in the control share), then until it answers
 * on the socket, the shim exits or the deadline passes. Connecting any earlier would race the
 * guest: libkrun would hold the refused connection 5 s (see the top of this file).
 */
async function waitForAgent(
  files: Pick<SandboxFiles, 'socket' | 'listening'>,
  exited: Promise<ProcessExit>,
  timeoutMs: number,
): Promise<Readiness> {
  const deadline = Date.now() + timeoutMs
  const gone = new AbortController()
  void exited.then(() => gone.abort())
  for (;;) {
    if (gone.signal.aborted) return { kind: 'exited' }
    const left = deadline - Date.now()
    if (left <= 0) return { kind: 'timeout' }
    if (fs.existsSync(files.listening) && (await agentAnswers(files.socket, left, gone.signal)))
      return { kind: 'ready' }
    await delay(Math.min(POLL_MS, Math.max(0, deadline - Date.now())))
  }
}

/**
 * One readiness probe: a HELLO offering no usable protocol version. Only the agent answers
 * it (with ERROR S202, then it closes), and it opens no session, so no token is needed.
 * False when the socket is missing, refused, closed without an answer, or time runs out.
 */
function agentAnswers(socketPath: string, timeoutMs: number, stop: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.createConnection(socketPath)
    const decoder = new FrameDecoder()
    const finish = (answered: boolean) => {
      clearTimeout(timer)
      stop.removeEventListener('abort', onStop)
      socket.destroy()
      resolve(answered)
    }
    const onStop = () => finish(false)
    const timer = setTimeout(() => finish(false), timeoutMs)
    stop.addEventListener('abort', onStop, { once: true })
    socket.once('connect', () => {
      const hello = { versionMin: 0, versionMax: 0, client: 'krunbox-boot-probe' }
      socket.write(encodeFrame(0, FrameType.HELLO, 0, Buffer.from(JSON.stringify(hello))))
    })
    socket.on('data', (chunk: Buffer) => {
      try {
        if (decoder.push(chunk).length > 0) finish(true)
      } catch {
        finish(true) // something that is not our agent answered; the handshake will say so
      }
    })
    socket.on('error', () => finish(false))
    socket.once('close', () => finish(false))
  })
}

/** S310/S311 from the shim's report, S300 for an exit without one, S305 for a silent VM; tails attached. */
function bootFailure(
  spec: BootSpec,
  exit: ProcessExit | null,
  report: ReturnType<typeof parseKrunShimBootError>,
  tails: { stderrTail: string; consoleTail: string },
): SandboxError {
  let code: SandboxError['code']
  let reason: string
  let details: Record<string, unknown> = {}
  if (exit === null) {
    code = 'S305'
    reason = `the agent did not answer on ${path.join(spec.controlDir, 'agent.sock')} within ${spec.bootTimeoutMs} ms`
  } else if (report) {
    const base = krunShimBootErrorToSandboxError(report)
    code = base.code
    reason = base.message.slice(base.code.length + 2) // without the "Sxxx: " prefix
    details = { ...base.details }
  } else {
    code = 'S300'
    const how = exit.signal ? `signal ${exit.signal}` : `exit code ${exit.exitCode}`
    const hint =
      exit.exitCode !== null && exit.exitCode >= 125 && exit.exitCode <= 127 ? ' (libkrun: the guest init failed)' : ''
    reason = `krun-shim exited with ${how}${hint} before the agent answered`
    details = { exitCode: exit.exitCode, signal: exit.signal }
  }
  let message = `sandbox ${spec.id} failed to boot: ${reason}`
  if (tails.stderrTail) message += `\n--- krun-shim stderr tail ---\n${tails.stderrTail}`
  if (tails.consoleTail) message += `\n--- guest console tail ---\n${tails.consoleTail}`
  return new SandboxError(code, message, { details: { ...details, ...tails } })
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms))
}
