/**
 * The options of create(): their type, the keys accepted, and their check into a CreatePlan
 * (every field validated, every default filled in). A new create option is a field here, its
 * key, its check, and whatever of the boot pipeline or the drivers it reaches.
 */
import { artifactsOption, type ArtifactsConfig, type ArtifactsOptions } from './artifacts.js'
import { BOOT_TIMEOUT_MS, CPUS, DETACHED_TTL_MS, DISK_MB, IDLE_TIMEOUT_MS, MEMORY_MB, PIDS_MAX } from './defaults.js'
import { DRIVER_CHOICES, type DriverChoice } from './drivers/names.js'
import type { ProgressEvent, ProgressListener } from './images/types.js'
import { looksLikeReference, parseReference } from './images/oci/reference.js'
import { splitPin } from './images/pin.js'
import { parseNetworkOption, type NetworkPolicy } from './network/policy.js'
import {
  assertString,
  describe,
  envMap,
  intInRange,
  metadataMap,
  oneOf,
  optionalAbortSignal,
  optionalBoolean,
  optionalString,
  optionsObject,
  userSpec,
} from './options.js'
import type { SnapshotInfo, SnapshotRef } from './snapshots.js'
import { errors } from './protocol/errors.gen.js'

/** What `CreateOptions.capabilities` may give root's commands. */
export type SandboxCapability = 'CHOWN' | 'DAC_OVERRIDE' | 'FOWNER' | 'SETUID' | 'SETGID'

/** Options of `create()`; every field is optional. Unknown keys are rejected (S001). Defaults and bounds: lib/defaults.ts. */
export interface CreateOptions {
  /**
   * A preset (`base`, `python`, `node`, `python-node`, `code-interpreter`), a `customImages` name, a registered image,
   * or an OCI reference (`ghcr.io/acme/app:1.2.3`, `python:3.12-slim`, `…@sha256:…`), pulled on
   * first use (docs/images.md). Any of them pinned to one version as `<image>@<imageVersion>`
   * (`python@<64 hex>`): that build or S101, never built nor pulled. Default `'base'`.
   */
  image?: string
  /** `'auto'` (default): `krun` when the host can boot microVMs, else `namespace`. */
  driver?: DriverChoice
  /** A label for listings: 1–63 of A-Z a-z 0-9 _ . - starting with a letter or digit. Default none. */
  name?: string
  /** Environment of every command (a command's own env wins). Keys starting with KRUNBOX are refused (S006). */
  env?: Record<string, string>
  /** Virtual CPUs (CPU share under the namespace driver). 1–256, default the runtime's `defaultCpus` (1). */
  cpus?: number
  /** Memory limit in MiB, files in /workspace and /tmp included. 32–1 048 576, default the runtime's `defaultMemoryMb` (512). */
  memoryMb?: number
  /** Most processes the workload may have at once. 8–1 000 000, default 1024. */
  pidsMax?: number
  /** Size cap of the private writable layer, in MiB. 16–1 048 576, default 1024. */
  diskMb?: number
  /** Ends the sandbox after this many ms without a command or call (see RuntimeConfig.defaultIdleTimeoutMs). Counted from when create has connected to it. 0 disables. Default 300 000. */
  idleTimeoutMs?: number
  /** Ends the sandbox this many ms after creation, whatever it is doing. 1 – maxTtlMs. Default none. */
  ttlMs?: number
  /** Up to 16 string pairs of a-z A-Z 0-9 _ - . : (≤ 4 KiB in all), kept with the sandbox (S007 otherwise). */
  metadata?: Record<string, string>
  /** false (default): no network but the sandbox's own loopback; true: any public destination; or a policy (docs/network.md). */
  network?: boolean | NetworkPolicyOptions
  /** Paths kept on the host when the sandbox ends, however it ends (lib/artifacts.ts). */
  artifacts?: ArtifactsOptions
  /** Commands run as this user unless they say otherwise: a name from the image's passwd (presets have `sandbox`, uid 1000), "uid" or "uid:gid". */
  user?: string
  /**
   * Capabilities held by the commands that run as the sandbox's root (uid 0), for software that
   * expects a real root: `chown`, `su`, servers that drop to another user. They act inside the
   * sandbox's user namespace only, on the ids it maps. Any of 'CHOWN', 'DAC_OVERRIDE', 'FOWNER',
   * 'SETUID', 'SETGID'. Default none: no command holds a capability.
   */
  capabilities?: SandboxCapability[]
  /** Keep running after this process exits (its idle timeout and TTL still end it). Default false. */
  detached?: boolean
  /** false: return at once in status `creating`; observe with ready()/waitFor() and the `progress` event. Default true. */
  wait?: boolean
  /** How long booting (not building the image) may take, in ms. 100–600 000, default 20 000. */
  bootTimeoutMs?: number
  /**
   * Aborts the create: while it waits for a slot (queue: true), for its image or for the boot.
   * The create then rejects with S206 once the sandbox's process is gone and its entry retired
   * (with `wait: false`, the sandbox fails with S206). A create that finished is not affected.
   */
  signal?: AbortSignal
  /** Boot from a snapshot (sb.snapshot()): its image plus its layer, copy-on-write. */
  from?: SnapshotRef
  /**
   * Called while the image is built on its first use (seconds for `python` or `node`; a cached
   * image calls it never). Percent is overall, 0–100, never decreasing. A listener that throws is ignored.
   */
  onProgress?: (event: ProgressEvent) => void
}

export interface NetworkPolicyOptions {
  allow?: string[]
  deny?: string[]
  allowHostLoopback?: boolean
  hosts?: Record<string, string>
}

export const CREATE_KEYS = [
  'image',
  'driver',
  'name',
  'env',
  'cpus',
  'memoryMb',
  'pidsMax',
  'diskMb',
  'idleTimeoutMs',
  'ttlMs',
  'metadata',
  'network',
  'detached',
  'wait',
  'bootTimeoutMs',
  'from',
  'onProgress',
  'user',
  'artifacts',
  'capabilities',
  'signal',
] as const
const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$/

// Every option has its key and every key its option: a missing one is a compile error here.
type CreateKey = (typeof CREATE_KEYS)[number]
const everyOptionKeyed: Record<Exclude<keyof CreateOptions, CreateKey>, never> &
  Record<Exclude<CreateKey, keyof CreateOptions>, never> = {}
void everyOptionKeyed

/** What checking the options needs of the runtime: its snapshots (for `from`) and its defaults. */
export interface PlanContext {
  readonly snapshots: { resolve(ref: unknown, what?: string): SnapshotInfo }
  readonly defaults: { cpus: number; memoryMb: number; idleTimeoutMs: number; maxTtlMs: number }
}

/** The create options, checked, with every default filled in. */
export interface CreatePlan {
  from: SnapshotInfo | null
  image: string
  driverChoice: DriverChoice
  name: string | null
  env: Record<string, string>
  cpus: number
  memoryMb: number
  pidsMax: number
  diskMb: number
  idleTimeoutMs: number
  ttlMs: number | null
  metadata: Record<string, string>
  network: NetworkPolicy | null
  detached: boolean
  user: string | undefined
  capabilities: SandboxCapability[]
  artifacts: ArtifactsConfig | undefined
  wait: boolean
  bootTimeoutMs: number
  onProgress: ProgressListener | undefined
  signal: AbortSignal | undefined
}

/** The options checked (types, ranges: S001, S003, S402 and the checks of each field) with the runtime's defaults for what is not given. */
export function planCreate(context: PlanContext, options: unknown): CreatePlan {
  const o = optionsObject(options, 'create options', CREATE_KEYS)
  const from: SnapshotInfo | null = o.from === undefined ? null : context.snapshots.resolve(o.from, 'from')
  const given = o.image === undefined ? (from?.image ?? 'base') : (assertString(o.image, 'image'), o.image)
  // An OCI reference in its canonical spelling, so the allowlist, records and cache agree on it; a pin (images/pin.ts) after it.
  const pin = splitPin(given)
  const named = looksLikeReference(pin.image) ? parseReference(pin.image).canonical : pin.image
  const image = pin.version === null ? named : `${named}@${pin.version}`
  if (from && image !== from.image)
    throw errors.outOfRange({
      field: 'image',
      allowed: `the image of snapshot ${from.id}, ${describe(from.image)}`,
      value: describe(image),
    })
  const driverChoice = oneOf(o.driver, 'driver', DRIVER_CHOICES, 'auto')
  const name = optionalString(o.name, 'name') ?? null
  if (name !== null && !NAME.test(name))
    throw errors.badArgument({
      subject: `name ${describe(name)}`,
      problem: 'must be 1-63 characters of A-Z a-z 0-9 _ . - starting with a letter or digit',
    })
  const env = envMap(o.env, 'env')
  const cpus = intInRange(o.cpus, 'cpus', CPUS.min, CPUS.max, context.defaults.cpus)
  const memoryMb = intInRange(o.memoryMb, 'memoryMb', MEMORY_MB.min, MEMORY_MB.max, context.defaults.memoryMb)
  const pidsMax = intInRange(o.pidsMax, 'pidsMax', PIDS_MAX.min, PIDS_MAX.max, PIDS_MAX.default)
  const diskMb = intInRange(o.diskMb, 'diskMb', DISK_MB.min, DISK_MB.max, DISK_MB.default)
  const idleTimeoutMs = intInRange(
    o.idleTimeoutMs,
    'idleTimeoutMs',
    IDLE_TIMEOUT_MS.min,
    IDLE_TIMEOUT_MS.max,
    context.defaults.idleTimeoutMs,
  )
  const maxTtlMs = context.defaults.maxTtlMs
  if (o.ttlMs !== undefined && typeof o.ttlMs === 'number' && Number.isInteger(o.ttlMs) && o.ttlMs > maxTtlMs) {
    throw errors.lifetimeOverMax({ subject: `ttlMs ${o.ttlMs}`, max: `${maxTtlMs} ms (the runtime's maxTtlMs)` })
  }
  const metadata = metadataMap(o.metadata)
  const network = parseNetworkOption(o.network)
  const detached = optionalBoolean(o.detached, 'detached', false)
  const user = userSpec(o.user, 'user')
  const capabilities = capabilitiesOption(o.capabilities)
  const artifacts = artifactsOption(o.artifacts)
  const ttlMs =
    o.ttlMs !== undefined
      ? intInRange(o.ttlMs, 'ttlMs', 1, maxTtlMs)
      : detached
        ? Math.min(DETACHED_TTL_MS, maxTtlMs)
        : null
  const wait = optionalBoolean(o.wait, 'wait', true)
  const bootTimeoutMs = intInRange(
    o.bootTimeoutMs,
    'bootTimeoutMs',
    BOOT_TIMEOUT_MS.min,
    BOOT_TIMEOUT_MS.max,
    BOOT_TIMEOUT_MS.default,
  )
  if (o.onProgress !== undefined && typeof o.onProgress !== 'function')
    throw errors.badArgument({ subject: 'onProgress', problem: `must be a function, got ${describe(o.onProgress)}` })
  const onProgress = o.onProgress as ProgressListener | undefined
  const signal = optionalAbortSignal(o.signal, 'signal')
  return {
    from,
    image,
    driverChoice,
    name,
    env,
    cpus,
    memoryMb,
    pidsMax,
    diskMb,
    idleTimeoutMs,
    ttlMs,
    metadata,
    network,
    detached,
    user,
    capabilities,
    artifacts,
    wait,
    bootTimeoutMs,
    onProgress,
    signal,
  }
}

const CAPABILITIES: readonly SandboxCapability[] = ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'SETUID', 'SETGID']

function capabilitiesOption(value: unknown): SandboxCapability[] {
  if (value === undefined) return []
  if (!Array.isArray(value))
    throw errors.badArgument({
      subject: 'capabilities',
      problem: `must be an array of ${CAPABILITIES.join(', ')}, got ${describe(value)}`,
    })
  for (const c of value) {
    if (!CAPABILITIES.includes(c))
      throw errors.badArgument({
        subject: `capabilities: ${describe(c)}`,
        problem: `is not one of ${CAPABILITIES.join(', ')}`,
      })
  }
  return [...new Set(value as SandboxCapability[])]
}
