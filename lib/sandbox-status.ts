/** Sandbox statuses and the transitions allowed between them. */
import { SANDBOX_STATUSES } from './protocol/contract.gen.js'

export type SandboxStatus = (typeof SANDBOX_STATUSES)[number]
export type DestroyedReason = 'user_killed' | 'ttl_expired' | 'idle_expired' | 'host_exit' | 'crashed'

const RANK: Record<SandboxStatus, number> = {
  creating: 0,
  starting: 1,
  ready: 2,
  running: 2,
  idle: 2,
  paused: 3,
  expiring: 4,
  destroyed: 5,
  failed: 5,
}

/** Monotonic, except that running/idle/ready move among themselves and paused returns to ready. */
export function canTransition(from: SandboxStatus, to: SandboxStatus): boolean {
  if (from === to) return false
  if (from === 'destroyed' || from === 'failed') return false
  if (from === 'paused' && (to === 'ready' || to === 'running' || to === 'idle')) return true
  if (to === 'failed') return from === 'creating' || from === 'starting'
  return RANK[to] >= RANK[from]
}

export function isLive(status: SandboxStatus): boolean {
  return status !== 'destroyed' && status !== 'failed'
}
