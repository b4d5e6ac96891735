/** What a driver needs to boot a sandbox around the agent, and what it hands back. */
import type { SandboxNetwork } from '../network/gateway.js'
import type { NetworkPolicy } from '../network/policy.js'
import type { DriverName } from './names.js'
import type { BootConfig } from '../protocol/contract.gen.js'

export type { DriverName }

/**
 * The agent's boot configuration (agent/boot/config.go says how it travels): the contract's
 * bootConfig (protocol/v1.json), whose Go struct agent/config reads, so both sides build from one list.
 */
export type AgentConfig = BootConfig

export interface BootSpec {
  id: string
  hostname: string
  imageRootfs: string
  /** Host directory of the snapshot to boot from (lib/snapshots.ts), bound read-only. */
  snapshotLayer?: string
  /** Per-sandbox state directory (0700, host only): the record and stderr log. Never shown to the sandbox. */
  sandboxDir: string
  /** `<sandboxDir>/ctl`: the control socket and the agent's records; the only host directory the sandbox sees. */
  controlDir: string
  cpus: number
  memoryMb: number
  pidsMax: number
  /** null: no network but the sandbox's own loopback. */
  network: NetworkPolicy | null
  /** The runtime's networkAllowlist as a policy every destination must also pass. */
  networkCap: NetworkPolicy | null
  detached: boolean
  agent: AgentConfig
  /** Deadline for the agent's READY/handshake. */
  bootTimeoutMs: number
}

export interface ProcessExit {
  exitCode: number | null
  signal: string | null
}

export interface BootedSandbox {
  /** Host pid of the sandbox process (bwrap or krun-shim). */
  pid: number
  socketPath: string
  /**
   * socketPath already listens (the host made it and the agent inherits it): a connection made
   * before `ready` waits in its queue, so the handshake can start while the agent boots.
   */
  listensEarly: boolean
  /** Resolves when the sandbox process exits. */
  exited: Promise<ProcessExit>
  /** Kills the whole sandbox at once (SIGKILL). */
  kill(): void
  /** Whether resource limits are enforced (cgroups) or only reported. */
  limits: { enforced: boolean; reason: string | null; cgroupPaths: string[] }
  /** Last lines of the sandbox process's stderr, for boot errors. */
  stderrTail(): string
  /** The host side of the sandbox's network policy (its counts and refusals), if it has one. */
  network?: SandboxNetwork
  /** Removes what the driver created on the host (cgroups), off the event loop. Idempotent. */
  cleanup(): Promise<void>
  /**
   * Resolves when the agent listens on socketPath; rejects with the boot failure (S300 and
   * friends) once the sandbox is killed and cleaned up. The caller writes its record meanwhile.
   */
  ready: Promise<void>
}

/**
 * What a driver can do, asked by the runtime and the boot pipeline instead of testing its name.
 * A new driver states each one; the compiler asks for all of them.
 */
export interface DriverCapabilities {
  /** How its agent boots (AgentConfig.mode). */
  readonly agentMode: AgentConfig['mode']
  /** Boots a snapshot's layer under its image (create({ from })); false: S312. */
  readonly fork: boolean
  /** Enforces a sandbox's network policy; when it cannot, why and what to do instead (S111). */
  readonly networkPolicy:
    { readonly enforced: true } | { readonly enforced: false; readonly why: string; readonly fix: string }
  /**
   * The sandbox's ids beyond its root are host ids, which a host user that is not root can give
   * only from its subordinate ranges (subids.ts): create checks an image's User against them
   * (S226). false: a kernel of the sandbox's own owns them.
   */
  readonly hostIdsFromSubordinates: boolean
  /**
   * Basename of the host process a sandbox runs as (its record's pid). Where no cgroup of the
   * sandbox says a pid is its own, liveness checks the pid runs this executable.
   */
  readonly processExecutable: string
  /**
   * A stopped sandbox can be reset from the host for a reuse pool's next lease (lib/pool-reset.ts:
   * the host joins its namespaces and rebuilds its root). false: a reuse pool destroys it at its stop.
   */
  readonly resetForReuse: boolean
}

export interface Driver {
  readonly name: DriverName
  readonly capabilities: DriverCapabilities
  /**
   * Throws when an explicit choice of this driver cannot boot on this host, naming the missing
   * piece, before any boot attempt. Absent: every problem shows at boot.
   */
  assertUsable?(): void
  /** Starts the sandbox process: resolves once it runs (see BootedSandbox.ready). */
  boot(spec: BootSpec): Promise<BootedSandbox>
}
