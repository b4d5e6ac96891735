/**
 * One error class and one registry of stable codes. Codes cross the native and
 * protocol boundaries as codes; nothing here ever parses a message.
 */
import { ERROR_REGISTRY, type ErrorType } from './protocol/contract.gen.js'

export type { ErrorType }

interface CodeInfo {
  type: ErrorType
  retryable: boolean
  summary: string
}

/** The registry, generated from protocol/v1.json (scripts/gen-protocol.mjs), as are ERRORS.md's tables. */
export const ERROR_CODES = ERROR_REGISTRY

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
