/**
 * One error class and one registry of stable codes. Codes cross the native and
 * protocol boundaries as codes; nothing here ever parses a message.
 */
import path from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
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

/**
 * The shipped ERRORS.md (the package root is one level above lib/ and dist/). A file: URL, not a
 * web page: the library makes no network promise, and the file is the one for this very version.
 */
const ERRORS_DOC = pathToFileURL(path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'ERRORS.md')).href

/** Where a code is explained: its row of the shipped ERRORS.md (each row carries the anchor `#<code>`). */
export function docsUrlOf(code: SandboxErrorCode): string {
  return `${ERRORS_DOC}#${code}`
}

/** The flat five-field form of an error that JSON.stringify(err) gives (field names as the reference envelope spells them). */
export interface SandboxErrorEnvelope {
  type: ErrorType
  code: SandboxErrorCode
  message: string
  docs_url: string
  retryable: boolean
}

export interface SandboxErrorOptions {
  cause?: unknown
  details?: Record<string, unknown>
  /**
   * Overrides the code's retry advice for this one error, where the cause decides it (an image
   * pull refused for bad credentials is S102 but not worth retrying; one cut off by the network is).
   */
  retryable?: boolean
}

export class SandboxError extends Error {
  readonly code: SandboxErrorCode
  readonly type: ErrorType
  readonly retryable: boolean
  readonly details: Record<string, unknown> | undefined
  /** The code's row in the shipped ERRORS.md, as a file: URL with the anchor `#<code>`. */
  readonly docsUrl: string
  #text: string

  constructor(code: SandboxErrorCode, message: string, options: SandboxErrorOptions = {}) {
    super(`${code}: ${message}`, options.cause === undefined ? undefined : { cause: options.cause })
    const info: CodeInfo = ERROR_CODES[code] ?? ERROR_CODES.S500
    this.code = code in ERROR_CODES ? code : 'S500'
    this.type = info.type
    this.retryable = options.retryable ?? info.retryable
    this.details = options.details
    this.docsUrl = docsUrlOf(this.code)
    this.#text = message
    Object.defineProperty(this, kSandboxError, { value: true })
  }

  /** The five-field envelope: type, code, message (without the code prefix), docs_url, retryable. */
  toJSON(): SandboxErrorEnvelope {
    return { type: this.type, code: this.code, message: this.#text, docs_url: this.docsUrl, retryable: this.retryable }
  }

  /** instanceof works across duplicated copies of the package (undici does the same). */
  static [Symbol.hasInstance](value: unknown): boolean {
    return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[kSandboxError] === true
  }

  /** Builds an error from a code that came over a boundary (agent, native addon). */
  static fromCode(code: unknown, message: string, options: SandboxErrorOptions = {}): SandboxError {
    const known = typeof code === 'string' && Object.hasOwn(ERROR_CODES, code)
    return new SandboxError(
      known ? (code as SandboxErrorCode) : 'S500',
      known ? message : `unknown error code ${String(code)}: ${message}`,
      options,
    )
  }
}
Object.defineProperty(SandboxError.prototype, 'name', { value: 'SandboxError', enumerable: false })

export function isSandboxError(value: unknown, code?: SandboxErrorCode): value is SandboxError {
  return value instanceof SandboxError && (code === undefined || value.code === code)
}
