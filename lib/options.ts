/** Input validation shared by every public entry point. Each failure names the bad value. */
import { MAX_ARG_STRLEN, MAX_COMMAND_TIMEOUT_MS, MAX_ENV_BYTES } from './defaults.js'
import { errors } from './protocol/errors.gen.js'

export const RESERVED_ENV_PREFIX = 'KRUNBOX'

export function describe(value: unknown): string {
  if (typeof value === 'string') return JSON.stringify(value.length > 80 ? value.slice(0, 80) + '…' : value)
  if (typeof value === 'bigint') return `${value}n`
  if (value === null || typeof value !== 'object') return String(value)
  if (Array.isArray(value)) return 'an array'
  return 'an object'
}

export function assertObject(value: unknown, name: string): asserts value is Record<string, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw errors.badArgument({ subject: `${name}`, problem: `must be an object, got ${describe(value)}` })
}

/** Options objects may be omitted; unknown keys are rejected so typos don't pass silently. */
export function optionsObject(value: unknown, name: string, allowed: readonly string[]): Record<string, unknown> {
  if (value === undefined) return {}
  assertObject(value, name)
  for (const key of Object.keys(value)) {
    if (!allowed.includes(key))
      throw errors.badArgument({ subject: `${name}`, problem: `has unknown option ${describe(key)}` })
  }
  return value
}

/** Longest string any option takes (a command line cannot exceed ARG_MAX, 2 MiB, anyway). */
export const MAX_STRING_LENGTH = 1024 * 1024

/** A lone surrogate has no UTF-8 form: it would reach the agent as U+FFFD, naming something else. */
export function isWellFormed(value: string): boolean {
  return !/\p{Cs}/u.test(value)
}

export function assertString(value: unknown, name: string, { nonEmpty = true } = {}): asserts value is string {
  if (typeof value !== 'string')
    throw errors.badArgument({ subject: `${name}`, problem: `must be a string, got ${describe(value)}` })
  if (nonEmpty && value.length === 0) throw errors.badArgument({ subject: `${name}`, problem: 'must not be empty' })
  if (value.length > MAX_STRING_LENGTH)
    throw errors.badArgument({
      subject: `${name}`,
      problem: `is ${value.length} characters long, at most ${MAX_STRING_LENGTH} are allowed: ${describe(value)}`,
    })
  if (value.includes('\0'))
    throw errors.badArgument({ subject: `${name}`, problem: `must not contain NUL bytes: ${describe(value)}` })
  if (!isWellFormed(value))
    throw errors.badArgument({
      subject: `${name}`,
      problem: `is not valid Unicode (a lone surrogate has no UTF-8 form): ${describe(value)}`,
    })
}

export function optionalString(value: unknown, name: string): string | undefined {
  if (value === undefined) return undefined
  assertString(value, name)
  return value
}

export function intInRange(value: unknown, name: string, min: number, max: number, fallback?: number): number {
  if (value === undefined && fallback !== undefined) return fallback
  if (typeof value !== 'number' || !Number.isInteger(value))
    throw errors.badArgument({ subject: `${name}`, problem: `must be an integer, got ${describe(value)}` })
  if (value < min || value > max) throw errors.outOfRange({ field: name, allowed: `between ${min} and ${max}`, value })
  return value
}

export function optionalBoolean(value: unknown, name: string, fallback: boolean): boolean {
  if (value === undefined) return fallback
  if (typeof value !== 'boolean')
    throw errors.badArgument({ subject: `${name}`, problem: `must be a boolean, got ${describe(value)}` })
  return value
}

export function oneOf<T extends string>(value: unknown, name: string, choices: readonly T[], fallback: T): T {
  if (value === undefined) return fallback
  if (typeof value !== 'string' || !choices.includes(value as T))
    throw errors.badArgument({
      subject: `${name}`,
      problem: `must be one of ${choices.join(', ')}, got ${describe(value)}`,
    })
  return value as T
}

export function stringArray(value: unknown, name: string): string[] {
  if (value === undefined) return []
  if (!Array.isArray(value))
    throw errors.badArgument({ subject: `${name}`, problem: `must be an array of strings, got ${describe(value)}` })
  value.forEach((v, i) => assertString(v, `${name}[${i}]`, { nonEmpty: false }))
  return value as string[]
}

const ENV_KEY = /^[A-Za-z_][A-Za-z0-9_]*$/

/** Environment maps: POSIX names, string values, and the reserved prefix refused (S006). */
export function envMap(value: unknown, name: string): Record<string, string> {
  if (value === undefined) return {}
  assertObject(value, name)
  const out: Record<string, string> = {}
  let total = 0
  for (const [key, v] of Object.entries(value)) {
    if (!ENV_KEY.test(key))
      throw errors.badArgument({
        subject: `${name} key ${describe(key)}`,
        problem: 'is not a valid environment variable name',
      })
    if (key.toUpperCase().startsWith(RESERVED_ENV_PREFIX))
      throw errors.reservedEnvKey({ field: name, key: describe(key), prefix: RESERVED_ENV_PREFIX })
    assertString(v, `${name}.${key}`, { nonEmpty: false })
    const bytes = Buffer.byteLength(key) + 1 + Buffer.byteLength(v)
    if (bytes >= MAX_ARG_STRLEN)
      throw errors.outOfRange({
        field: `${name}.${key}`,
        allowed: `under ${MAX_ARG_STRLEN} bytes as KEY=VALUE (Linux passes no longer variable to a program)`,
        value: `${bytes} bytes`,
      })
    total += bytes + 1
    out[key] = v
  }
  if (total > MAX_ENV_BYTES)
    throw errors.outOfRange({
      field: name,
      allowed: `at most ${MAX_ENV_BYTES} bytes in all (with the command line, a program gets 2 MiB)`,
      value: `${total} bytes`,
    })
  return out
}

/** The signal names the agent knows (agent/exec/signals.go). */
const SIGNAL_NAMES = new Set(
  'HUP INT QUIT ILL TRAP ABRT BUS FPE KILL USR1 SEGV USR2 PIPE ALRM TERM STKFLT CHLD CONT STOP TSTP TTIN TTOU URG XCPU XFSZ VTALRM PROF WINCH IO PWR SYS'
    .split(' ')
    .map((n) => `SIG${n}`),
)

/** A signal's name as the agent takes it ("SIGTERM"); S001 naming anything else. */
export function signalName(value: unknown, name: string): string {
  if (typeof value !== 'string' || !SIGNAL_NAMES.has(value))
    throw errors.badArgument({
      subject: name,
      problem: `must be a signal name like "SIGTERM" (one of ${[...SIGNAL_NAMES].join(', ')}), got ${describe(value)}`,
    })
  return value
}

export function absolutePath(value: unknown, name: string): string {
  assertString(value, name)
  if (!value.startsWith('/'))
    throw errors.badArgument({ subject: name, problem: `must be an absolute path, got ${describe(value)}` })
  return value
}

export function optionalAbortSignal(value: unknown, name: string): AbortSignal | undefined {
  if (value === undefined) return undefined
  if (!(value instanceof AbortSignal))
    throw errors.badArgument({ subject: `${name}`, problem: `must be an AbortSignal, got ${describe(value)}` })
  return value
}

const METADATA_KEY = /^[A-Za-z0-9_.:-]+$/

/** Metadata: ≤ 16 keys, keys ≤ 64 chars, values ≤ 512, ≤ 4 KiB in all, characters a-z A-Z 0-9 _ - . : */
export function metadataMap(value: unknown, name = 'metadata'): Record<string, string> {
  if (value === undefined) return {}
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw errors.badMetadata({
      subject: `${name}`,
      problem: `must be a flat object of strings, got ${describe(value)}`,
    })
  const entries = Object.entries(value)
  if (entries.length > 16)
    throw errors.badMetadata({ subject: `${name}`, problem: `has ${entries.length} keys, at most 16 are allowed` })
  let total = 0
  const out: Record<string, string> = {}
  for (const [key, v] of entries) {
    if (key.length === 0 || key.length > 64)
      throw errors.badMetadata({ subject: `${name} key ${describe(key)}`, problem: 'must be 1 to 64 characters' })
    if (!METADATA_KEY.test(key))
      throw errors.badMetadata({ subject: `${name} key ${describe(key)}`, problem: 'may only use a-z A-Z 0-9 _ - . :' })
    if (typeof v !== 'string')
      throw errors.badMetadata({
        subject: `${name} key ${describe(key)}`,
        problem: `must have a string value, got ${describe(v)}`,
      })
    if (v.length > 512)
      throw errors.badMetadata({
        subject: `${name} key ${describe(key)}`,
        problem: `has a value of ${v.length} characters, at most 512 are allowed`,
      })
    if (v.length > 0 && !METADATA_KEY.test(v))
      throw errors.badMetadata({
        subject: `${name} key ${describe(key)}`,
        problem: 'has a value with characters outside a-z A-Z 0-9 _ - . :',
      })
    total += key.length + v.length
    out[key] = v
  }
  if (total > 4096)
    throw errors.badMetadata({ subject: `${name}`, problem: `totals ${total} bytes, at most 4096 are allowed` })
  return out
}

const USER_SPEC = /^(?:[A-Za-z_][A-Za-z0-9_.-]{0,31}|\d{1,10}(?::\d{1,10})?)$/

/** A sandbox user: a name from the image's /etc/passwd, "uid" or "uid:gid" (the agent resolves it). */
export function userSpec(value: unknown, name: string): string | undefined {
  if (value === undefined) return undefined
  assertString(value, name)
  if (!USER_SPEC.test(value))
    throw errors.badArgument({
      subject: `${name}`,
      problem: `must be a user name, "uid" or "uid:gid", got ${describe(value)}`,
    })
  return value
}

// MAX_COMMAND_TIMEOUT_MS (lib/defaults.ts) is a week: a host timer cannot go past 24.8 days anyway.

/**
 * A command's deadline in ms, or null for none (only `null` says so: Infinity is not a number of
 * ms, and a deadline lost to a computed Infinity should not pass silently); undefined takes the
 * fallback (exec has a default, start has none).
 */
export function commandTimeout(value: unknown, name: string, fallback: number | null): number | null {
  if (value === undefined) return fallback
  if (value === null) return null
  if (typeof value !== 'number' || !Number.isInteger(value))
    throw errors.badArgument({
      subject: `${name}`,
      problem: `must be an integer number of ms, or null for no deadline, got ${describe(value)}`,
    })
  if (value < 1 || value > MAX_COMMAND_TIMEOUT_MS)
    throw errors.outOfRange({
      field: name,
      allowed: `between 1 and ${MAX_COMMAND_TIMEOUT_MS} ms (or null for no deadline)`,
      value,
    })
  return value
}
