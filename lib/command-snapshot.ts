/** Command state as reported by the agent, checked field by field (the host trusts nothing from a sandbox). */
import {
  COMMAND_STATUSES,
  type CommandSnapshotWire,
  type CommandUsageWire,
  ENDED_COMMAND_STATUSES,
  MESSAGES,
} from './protocol/contract.gen.js'
import { FrameError } from './protocol/frame.js'

export type CommandStatus = (typeof COMMAND_STATUSES)[number]
export const ENDED_STATUSES: ReadonlySet<CommandStatus> = new Set(ENDED_COMMAND_STATUSES)

export type CommandUsage = CommandUsageWire

/**
 * A command as the agent reports it: the contract's commandSnapshot (its fields and their docs),
 * with the one reason a command is killed by the host spelled out.
 */
export interface CommandSnapshot extends Omit<CommandSnapshotWire, 'killedReason'> {
  killedReason: 'sandbox_destroyed' | null
}

function num(v: unknown): number | null {
  return typeof v === 'number' && Number.isFinite(v) ? v : null
}
function str(v: unknown, max = 4096): string | null {
  return typeof v === 'string' ? v.slice(0, max) : null
}

export function parseSnapshot(value: unknown): CommandSnapshot {
  if (typeof value !== 'object' || value === null)
    throw new FrameError('S204', MESSAGES.badFrame({ subject: 'command snapshot', problem: 'is not an object' }))
  const o = value as Record<string, unknown>
  const id = str(o.id, 128)
  if (!id) throw new FrameError('S204', MESSAGES.badFrame({ subject: 'command snapshot', problem: 'has no id' }))
  if (!COMMAND_STATUSES.includes(o.status as CommandStatus))
    throw new FrameError(
      'S204',
      MESSAGES.badFrame({ subject: `command ${id}`, problem: `has unknown status ${String(o.status).slice(0, 40)}` }),
    )
  const u = o.usage as Record<string, unknown> | null | undefined
  return {
    id,
    argv: Array.isArray(o.argv) ? o.argv.filter((a): a is string => typeof a === 'string') : [],
    status: o.status as CommandStatus,
    pid: num(o.pid),
    exitCode: num(o.exitCode),
    signal: str(o.signal, 32) || null,
    timedOut: o.timedOut === true,
    timeoutMs: num(o.timeoutMs),
    startedAt: num(o.startedAt),
    endedAt: num(o.endedAt),
    durationMs: num(o.durationMs),
    cancelMode: o.cancelMode === 'graceful' || o.cancelMode === 'force' ? o.cancelMode : null,
    canceledAt: num(o.canceledAt),
    terminationSignal: str(o.terminationSignal, 32) || null,
    killedReason: o.killedReason === 'sandbox_destroyed' ? 'sandbox_destroyed' : null,
    failReason: str(o.failReason) || timeoutReason(o),
    stdoutTruncated: o.stdoutTruncated === true,
    stderrTruncated: o.stderrTruncated === true,
    firstSeq: num(o.firstSeq) ?? 0,
    nextSeq: num(o.nextSeq) ?? 0,
    usage:
      u && typeof u === 'object'
        ? {
            userMs: num(u.userMs) ?? 0,
            systemMs: num(u.systemMs) ?? 0,
            maxRssKb: num(u.maxRssKb) ?? null,
            oomKilled: u.oomKilled === true,
          }
        : null,
  }
}

/** A timed-out command's failReason when the agent gave none: the status carries the error message, as timeouts do in the reference APIs. */
function timeoutReason(o: Record<string, unknown>): string | null {
  if (o.status !== 'timed_out') return null
  const ms = num(o.timeoutMs)
  return `timed out after ${ms === null ? 'its deadline' : `${ms} ms (timeoutMs)`}: its process group was sent SIGTERM, then SIGKILL after killGraceMs`
}
