import { errors } from '../protocol/errors.gen.js'
/** Human durations for the CLI: 500ms, 30s, 5m, 2h, 1d, or a bare number of seconds (as `sleep` reads it). */

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }

export function parseDuration(text: string, flag: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$/.exec(text.trim())
  if (!m)
    throw errors.badArgument({
      subject: `${flag}`,
      problem: `must be a duration like 300 (seconds), 500ms, 30s, 5m, 2h or 1d, got ${JSON.stringify(text)}`,
    })
  const ms = Math.round(Number(m[1]) * UNITS[m[2] ?? 's'])
  if (!Number.isSafeInteger(ms))
    throw errors.outOfRange({
      field: flag,
      allowed: `at most ${Number.MAX_SAFE_INTEGER} ms`,
      value: JSON.stringify(text),
    })
  return ms
}

export function formatDuration(ms: number): string {
  if (ms < 1000) return `${ms}ms`
  if (ms < 60_000) return `${Math.round(ms / 100) / 10}s`
  if (ms < 3_600_000) return `${Math.round(ms / 6000) / 10}m`
  return `${Math.round(ms / 360_000) / 10}h`
}
