/**
 * One error class and one registry of stable codes. Codes cross the native and
 * protocol boundaries as codes; nothing here ever parses a message.
 */
export type ErrorType =
  | 'validation'
  | 'config'
  | 'execution'
  | 'filesystem'
  | 'protocol'
  | 'platform'
  | 'limit'
  | 'internal'

interface CodeInfo {
  type: ErrorType
  retryable: boolean
  summary: string
}

/** The registry. ERRORS.md is generated from the same table (see test/unit/errors.test.ts). */
export const ERROR_CODES = {
  S001: { type: 'validation', retryable: false, summary: 'Invalid argument (wrong type, malformed value, unknown option)' },
  S002: { type: 'validation', retryable: false, summary: 'No live sandbox with this id' },
  S003: { type: 'validation', retryable: false, summary: 'Option out of its allowed range' },
  S004: { type: 'validation', retryable: false, summary: 'Sandbox already stopped (or stopping)' },
  S005: { type: 'validation', retryable: false, summary: 'Access denied: wrong or missing access token, or socket owned by another user' },
  S006: { type: 'validation', retryable: false, summary: 'Environment key uses the reserved KRUNBOX prefix' },
  S007: { type: 'validation', retryable: false, summary: 'Invalid metadata (key, value, count or size)' },
  S008: { type: 'validation', retryable: false, summary: 'No command with this id in the sandbox' },
  S009: { type: 'validation', retryable: false, summary: 'Sandbox did not reach the awaited status in time' },
  S100: { type: 'config', retryable: false, summary: 'Image not in the runtime allowlist' },
  S101: { type: 'config', retryable: false, summary: 'Image unknown or not built' },
  S102: { type: 'config', retryable: true, summary: 'Image build failed' },
  S103: { type: 'config', retryable: false, summary: 'Invalid runtime configuration' },
  S104: { type: 'config', retryable: false, summary: 'Custom image source path does not exist' },
  S105: { type: 'config', retryable: false, summary: 'Custom image source is not a root filesystem' },
  S106: { type: 'config', retryable: false, summary: 'Custom image source is unreadable' },
  S107: { type: 'config', retryable: false, summary: 'Custom image name clashes with a preset' },
  S108: { type: 'config', retryable: false, summary: 'No snapshot with this id or name' },
  S109: { type: 'config', retryable: true, summary: 'Snapshot in use (by a live sandbox booted from it, or a pool) and not removed' },
  S110: { type: 'config', retryable: false, summary: "Network policy not within the runtime's networkAllowlist (the entry named)" },
  S111: { type: 'config', retryable: false, summary: 'Network policy cannot be enforced by this driver (krun: refused at create, never a silently open VM)' },
  S200: { type: 'execution', retryable: false, summary: 'Operation timed out, or the agent did not answer within the host\'s deadline (PROTOCOL.md "Host deadlines")' },
  S202: { type: 'protocol', retryable: false, summary: 'No common protocol version with the agent' },
  S203: { type: 'protocol', retryable: false, summary: 'Frame larger than the 4 MiB cap (fails the one request it belongs to)' },
  S204: { type: 'protocol', retryable: false, summary: 'Malformed or unexpected frame or answer from the agent (fails the one request it belongs to)' },
  S205: { type: 'execution', retryable: false, summary: 'Sandbox process died or the connection to it was lost' },
  S206: { type: 'execution', retryable: false, summary: 'Aborted by the caller' },
  S210: { type: 'filesystem', retryable: false, summary: 'Invalid filesystem request (bad path, mode, pattern, form)' },
  S211: { type: 'filesystem', retryable: false, summary: 'Path not found' },
  S212: { type: 'filesystem', retryable: false, summary: 'Wrong file type' },
  S213: { type: 'filesystem', retryable: false, summary: 'Path already exists' },
  S214: { type: 'filesystem', retryable: false, summary: 'Directory not empty' },
  S215: { type: 'filesystem', retryable: false, summary: 'Permission denied inside the sandbox' },
  S216: { type: 'filesystem', retryable: false, summary: 'I/O error inside the sandbox' },
  S217: { type: 'filesystem', retryable: false, summary: 'Regular expression does not compile' },
  S218: { type: 'filesystem', retryable: true, summary: 'Upload aborted before its end; the target is untouched' },
  S219: { type: 'filesystem', retryable: false, summary: 'Operation not supported by this agent' },
  S220: { type: 'filesystem', retryable: false, summary: 'Snapshot failed: the writable layer could not be read or stored, or the sandbox sent a malformed one' },
  S223: { type: 'execution', retryable: false, summary: 'Log stream gap: requested chunks fell out of retention' },
  S224: { type: 'execution', retryable: false, summary: 'Command could not be started by the agent' },
  S225: { type: 'execution', retryable: false, summary: "The command's stdin stream failed; the command was killed" },
  S226: { type: 'execution', retryable: false, summary: 'The user asked for has an id the sandbox does not map (a host user without subordinate ids gets one uid)' },
  S230: { type: 'execution', retryable: true, summary: 'Nothing listens on that TCP port inside the sandbox (connection refused)' },
  S231: { type: 'execution', retryable: false, summary: 'A port connection broke: the service inside the sandbox reset it, or closed it while the host was still sending' },
  S232: { type: 'execution', retryable: false, summary: 'The host port of a forward cannot be listened on (in use or not permitted)' },
  S300: { type: 'platform', retryable: false, summary: 'Sandbox failed to boot (stderr tail attached)' },
  S301: { type: 'platform', retryable: false, summary: 'krun driver unavailable on this host: no usable hardware KVM (reason in message)' },
  S302: { type: 'platform', retryable: false, summary: 'Namespace driver unavailable (bubblewrap missing or unusable)' },
  S303: { type: 'platform', retryable: false, summary: 'Native addon or agent binary missing or not built for this platform; the message names what to install' },
  S304: { type: 'platform', retryable: false, summary: 'Spawning the sandbox process failed' },
  S305: { type: 'platform', retryable: false, summary: 'Agent did not complete the handshake before the boot deadline' },
  S310: { type: 'platform', retryable: false, summary: 'A libkrun call failed during boot, or an entry cannot travel on the guest kernel command line (call, errno and the entry named)' },
  S311: { type: 'platform', retryable: false, summary: 'libkrun or libkrunfw unusable: not loadable, libkrun older than 1.18.0 (missing symbols named), or libkrunfw.so.5 not loadable by name' },
  S312: { type: 'platform', retryable: false, summary: 'Fork from a snapshot is not supported by this driver (krun; see docs/pool-and-snapshots.md)' },
  S400: { type: 'limit', retryable: false, summary: 'cpus/memory over the per-image cap' },
  S401: { type: 'limit', retryable: true, summary: 'Too many concurrent sandboxes' },
  S402: { type: 'limit', retryable: false, summary: 'TTL or idle timeout over the maximum' },
  S403: { type: 'limit', retryable: false, summary: 'Artifacts over their size cap: what fit was kept (in the sandbox record, not thrown)' },
  S500: { type: 'internal', retryable: false, summary: 'Internal error (a bug; cause attached)' },
} as const satisfies Record<string, CodeInfo>

export type SandboxErrorCode = keyof typeof ERROR_CODES

const kSandboxError = Symbol.for('krunbox.error')

export interface SandboxErrorOptions {
  cause?: unknown
  details?: Record<string, unknown>
}

export class SandboxError extends Error {
  readonly code: SandboxErrorCode
  readonly type: ErrorType
  readonly retryable: boolean
  readonly details: Record<string, unknown> | undefined

  constructor(code: SandboxErrorCode, message: string, options: SandboxErrorOptions = {}) {
    super(`${code}: ${message}`, options.cause === undefined ? undefined : { cause: options.cause })
    const info: CodeInfo = ERROR_CODES[code] ?? ERROR_CODES.S500
    this.code = code in ERROR_CODES ? code : 'S500'
    this.type = info.type
    this.retryable = info.retryable
    this.details = options.details
    Object.defineProperty(this, kSandboxError, { value: true })
  }

  /** instanceof works across duplicated copies of the package (undici does the same). */
  static [Symbol.hasInstance](value: unknown): boolean {
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[kSandboxError] === true
  }

  /** Builds an error from a code that came over a boundary (agent, native addon). */
  static fromCode(code: unknown, message: string, options: SandboxErrorOptions = {}): SandboxError {
    const known = typeof code === 'string' && Object.hasOwn(ERROR_CODES, code)
    return new SandboxError(known ? (code as SandboxErrorCode) : 'S500', known ? message : `unknown error code ${String(code)}: ${message}`, options)
  }
}
Object.defineProperty(SandboxError.prototype, 'name', { value: 'SandboxError', enumerable: false })

export function isSandboxError(value: unknown, code?: SandboxErrorCode): value is SandboxError {
  return value instanceof SandboxError && (code === undefined || value.code === code)
}
