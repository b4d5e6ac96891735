/**
 * What the host and krun-shim (native/src/shim) say to each other: the configuration the shim
 * reads as one JSON object from fd 3, and the boot-error line it writes to fd 4 before a failing
 * exit, turned into a SandboxError here. The shim's C side of the same: shim_config.h and
 * shim_report.h.
 */
import { SandboxError, type SandboxErrorCode } from '../errors.js'
import { errnoName } from '../native.js'
import { KRUN_SHIM, MESSAGES } from '../protocol/contract.gen.js'

/** The shim reads its configuration (one JSON object, to EOF) from this fd. */
export const KRUN_SHIM_CONFIG_FD = KRUN_SHIM.fds.config
/** The shim writes one boot-error JSON line here before a failing exit (optional fd). */
export const KRUN_SHIM_BOOT_ERROR_FD = KRUN_SHIM.fds.bootError
/** Exit status of the shim after a boot error (distinct from libkrun's 125/126/127). */
export const KRUN_SHIM_BOOT_ERROR_EXIT = 71
/** virtio-fs tag under which the image directory is shared (read-only). */
export const KRUN_IMAGE_TAG = KRUN_SHIM.tags.image

/**
 * The shim's configuration: JSON.stringify() it into the pipe at fd 3 and close
 * the write end. Unknown keys are rejected. fds ≥ 5 are closed by the shim.
 */
export interface KrunShimConfig {
  /** dlopen() name or path; default 'libkrun.so.1' */
  libkrunPath?: string
  /** krun_set_log_level, 0 off … 5 trace; default 1 (errors, to the shim's stderr) */
  logLevel?: number
  /** krun_set_vm_config(ctx, cpus, memoryMib); cpus 1..254 on x86_64, 1..255 elsewhere */
  cpus: number
  memoryMib: number
  /** krun_set_root: absolute host path of the boot directory holding the agent */
  rootDir: string
  /** krun_add_virtiofs3(ctx, 'krunbox-image', imageDir, 0, read_only=true); absolute */
  imageDir?: string
  /** krun_add_virtiofs3(ctx, 'krunbox-ctl', ctlDir, 0, read_only=false): where the agent records exit.json; absolute */
  ctlDir?: string
  /** krun_add_virtiofs3(ctx, 'krunbox-boot', bootConfigDir, 0, read_only=true): holds only the agent's config.json */
  bootConfigDir?: string
  /** krun_set_exec: the agent, relative to rootDir (e.g. '/krunbox-agent') */
  agentPath: string
  /** arguments after the program name */
  agentArgs?: string[]
  /** the agent's complete environment, KEY=VALUE (the host environment is never passed). Like agentArgs it
   * travels on the guest kernel command line: printable ASCII without spaces or quotes, short (krun-shim checks) */
  env?: string[]
  /** run the VMM in a new user namespace with these uid_map lines ("inside outside count"; must map 0) */
  uidMap?: string[]
  /** the gid_map lines; required with uidMap */
  gidMap?: string[]
  /** absolute paths of the setuid helpers that write the maps (a host user's subordinate ids); with newgidmap and uidMap */
  newuidmap?: string
  newgidmap?: string
  /** false (default): krun_disable_implicit_vsock + krun_add_vsock(ctx, 0), no TSI networking */
  network?: boolean
  /** krun_add_vsock_port2(ctx, vsockPort, socketPath, listen=true): libkrun creates socketPath */
  vsockPort: number
  socketPath: string
  /** krun_set_console_output: guest console to this file */
  consoleOutput?: string
}

export type KrunShimStage =
  | 'config'
  | 'dlopen'
  | 'dlsym'
  | 'userns'
  | 'set_log_level'
  | 'create_ctx'
  | 'set_vm_config'
  | 'set_root'
  | 'add_virtiofs3'
  | 'set_exec'
  | 'disable_implicit_vsock'
  | 'add_vsock'
  | 'add_vsock_port2'
  | 'set_console_output'
  | 'start_enter'

export interface KrunShimBootError {
  stage: KrunShimStage
  /** 'krun_set_vm_config', 'dlopen', …; null for config errors */
  call: string | null
  /** positive errno */
  errno: number
  message: string
}

export function encodeKrunShimConfig(config: KrunShimConfig): string {
  return JSON.stringify(config)
}

/** The first boot-error line of what the shim wrote to fd 4, or null if there is none or it is malformed. */
export function parseKrunShimBootError(text: string): KrunShimBootError | null {
  const line = text.split('\n').find((l) => l.trim() !== '')
  if (line === undefined) return null
  let value: unknown
  try {
    value = JSON.parse(line)
  } catch {
    return null
  }
  const v = value as Record<string, unknown>
  if (typeof v !== 'object' || v === null) return null
  if (typeof v.stage !== 'string' || typeof v.errno !== 'number' || typeof v.message !== 'string') return null
  if (v.call !== null && typeof v.call !== 'string') return null
  return { stage: v.stage as KrunShimStage, call: v.call as string | null, errno: v.errno, message: v.message }
}

/** S311 for dlopen/dlsym (libkrun missing or too old), S103 for config, S310 for a failing krun_* call. */
export function krunShimBootErrorToSandboxError(report: KrunShimBootError): SandboxError {
  const code: SandboxErrorCode =
    report.stage === 'dlopen' || report.stage === 'dlsym' ? 'S311' : report.stage === 'config' ? 'S103' : 'S310'
  const problem = `failed at ${report.stage}: ${report.message}`
  const message =
    code === 'S310'
      ? MESSAGES.krunCallFailed({ stage: report.stage, reason: report.message })
      : (code === 'S311' ? MESSAGES.krunUnusable : MESSAGES.badRuntimeConfig)({ subject: 'krun-shim', problem })
  return new SandboxError(code, message, {
    details: { stage: report.stage, call: report.call, errno: report.errno, errnoName: errnoName(report.errno) },
  })
}
