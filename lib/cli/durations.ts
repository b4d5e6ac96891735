/** Human durations for the CLI: 500ms, 30s, 5m, 2h, or a bare number of milliseconds. */
import { SandboxError } from '../errors.js'

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 }

export function parseDuration(text: string, flag: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim())
  if (!m) throw new SandboxError('S001', `${flag} must be a duration like 500ms, 30s, 5m or 2h, got ${JSON.stringify(text)}`)
  return Math.round(Number(m[1]) * UNITS[m[2] ?? 'ms'])
}

export function formatDuration(ms: number): string {
  if (ms < 1000) return `${ms}ms`
  if (ms < 60_000) return `${Math.round(ms / 100) / 10}s`
  if (ms < 3_600_000) return `${Math.round(ms / 6000) / 10}m`
  return `${Math.round(ms / 360_000) / 10}h`
}
