/**
 * How runtime.create() boots a sandbox, one named step after another:
 *
 *   validate → check policy → reserve capacity → new handle →
 *   resolve image → state dir → start driver → record ∥ (agent ready → handshake) → attach
 *
 * The steps up to the handle run on the caller's path (their errors reject create()); the rest
 * is the boot, which create({ wait: false }) lets run on its own while the handle reports it.
 * Every step after "reserve capacity" leaves nothing behind when a later one fails. The caller's
 * signal aborts the wait for a slot, for the image and the boot, with the same guarantee.
 */
import crypto, { randomUUID } from 'node:crypto'
import { chooseDriver } from './drivers/choose.js'
import { planCreate, type CreatePlan, type PlanContext } from './create-options.js'
import { IDLE_TIMEOUT_MS } from './defaults.js'
import type { BootedSandbox, Driver } from './drivers/types.js'
import { SandboxError } from './errors.js'
import { hostWriteError } from './host-write-error.js'
import { looksLikeReference } from './images/oci/reference.js'
import { assertImageUserMapped } from './images/oci/rootless-user.js'
import { splitPin } from './images/pin.js'
import { imageStoreControl } from './images/store.js'
import type { ImageUse } from './images/users.js'
import {
  isPresetName,
  PRESETS,
  type ImageStore,
  type ProgressEvent,
  type ProgressListener,
  type ResolvedImage,
} from './images/index.js'
import type { NetworkPolicy } from './network/policy.js'
import { describe } from './options.js'
import { AgentConnection } from './protocol/client.js'
import { spawnReaper } from './reaper.js'
import type { ImageCaps } from './runtime-config.js'
import { sandboxControl, type Sandbox, type SandboxBackend } from './sandbox.js'
import { snapshotStoreControl, type SnapshotStore } from './snapshots.js'
import { processStartTime, sha256, type SandboxRecord, type StateDir } from './state.js'
import { withSpan } from './telemetry.js'
import { warnOnce } from './warn.js'
import { errors } from './protocol/errors.gen.js'

/** What the pipeline needs from its runtime. */
export interface CreateHost extends PlanContext {
  readonly images: ImageStore
  readonly state: StateDir
  readonly snapshots: SnapshotStore
  /** The image allowlist (null: none). */
  readonly allowlist: ReadonlySet<string> | null
  isCustomImage(name: string): boolean
  capsOf(image: string): ImageCaps | undefined
  /** The runtime's cap on a network policy (S110), or null. */
  networkCap(network: NetworkPolicy | null): NetworkPolicy | null
  /** A slot under maxConcurrentSandboxes: its release function, or a promise of one (queue: true). */
  takeSlot(signal?: AbortSignal): (() => void) | Promise<() => void>
  resolveImage(name: string, onProgress: ProgressListener): Promise<ResolvedImage>
  /** The runtime knows the sandbox from here on (close(), list(), host-exit cleanup); release frees its slot. */
  track(id: string, sandbox: Sandbox, release: () => void, owned: boolean): void
  /** The sandbox's process is up: host-exit cleanup now has something to kill. */
  booted(id: string, booted: BootedSandbox): void
  /** Forgets the sandbox and frees its slot (idempotent). */
  release(id: string, sandbox: Sandbox): void
  /** The handle's way to its agent and to its end. */
  backend(id: string, booted: BootedSandbox, connection: AgentConnection, hasArtifacts: boolean): SandboxBackend
}

/** Where the policy lets the sandbox boot. */
interface Placement {
  driver: Driver
  networkCap: NetworkPolicy | null
}

/** One sandbox being booted: its plan, where, its handle and its secrets. */
interface Boot {
  plan: CreatePlan
  placement: Placement
  sandbox: Sandbox
  id: string
  accessToken: string
  expiresAt: number | null
  /** The latest deadline extendTtl() may reach: creation + the runtime's maxTtlMs (0 without a TTL). */
  maxExpiresAt: number
  /** Removes a fork's mark on its snapshot (set by record()). */
  forgetUser: () => void
  /** The sandbox's mark on its image, which prune respects (set by resolveImage()). */
  imageUse: ImageUse | null
}

export async function createSandbox(host: CreateHost, options: unknown): Promise<Sandbox> {
  // 1. validate (create-options.ts)
  const plan = planCreate(host, options)
  const { signal } = plan
  const placement = await checkPolicy(host, plan)
  const release = await reserveCapacity(host, signal)
  const boot = newHandle(host, plan, placement, release)
  const createdAt = Date.now()
  const booting = withSpan(
    'krunbox.create',
    { 'krunbox.sandbox.id': boot.id, 'krunbox.image': plan.image },
    async (mark) => {
      mark('image')
      const resolved = await unlessAborted(resolveImage(host, boot), signal, 'while it waited for its image')
      // The boot timeout counts from here: building or pulling the image is not booting.
      const deadline = Date.now() + plan.bootTimeoutMs
      if (signal?.aborted) throw createAborted('before its boot', signal)
      mark('spawn')
      const sandboxDir = await prepareStateDir(host, boot)
      const booted = await startDriver(host, boot, resolved, sandboxDir)
      mark('boot')
      const connection = await handshakeUnlessAborted(host, boot, resolved, booted, deadline)
      mark('agent ready')
      attach(host, boot, booted, connection)
    },
  )
  const settled = booting.catch(async (err) => {
    const e = bootError(host, boot, err)
    // Whatever booted is being ended: its image is free again.
    await boot.imageUse?.release().catch(() => {})
    // list({ includeHistorical }) shows it as failed, also when it failed before it had an entry (an image error).
    await host.state.recordFailed(
      { id: boot.id, name: plan.name, image: plan.image, createdAt, metadata: plan.metadata },
      e,
    )
    sandboxControl.markFailed(boot.sandbox, e)
    throw e
  })
  if (!plan.wait) {
    settled.catch(() => {})
    return boot.sandbox
  }
  await settled
  return boot.sandbox
}

/** What a failed boot reports: S206 when the caller aborted it (whatever step that broke), else the step's error. */
function bootError(host: CreateHost, boot: Boot, err: unknown): SandboxError {
  const { signal } = boot.plan
  if (signal?.aborted)
    return err instanceof SandboxError && err.code === 'S206' ? err : createAborted('during its boot', signal)
  if (err instanceof SandboxError) return err
  // The host's own writes on the way (its entry, the agent's config, the control socket): the path, not "failed to boot".
  return (
    hostWriteError(err, host.state.sandboxDir(boot.id)) ??
    errors.bootFailed({ sandboxId: boot.id, reason: (err as Error).message }, { cause: err })
  )
}

/** 2. The runtime's policy: the image allowlist, known images, per-image caps, the driver, the network cap. */
async function checkPolicy(host: CreateHost, plan: CreatePlan): Promise<Placement> {
  const { from } = plan
  // A pinned image is a version of the image it names: the allowlist, known images and caps go by that name.
  const { image } = splitPin(plan.image)
  if (host.allowlist !== null && !host.allowlist.has(image)) {
    throw errors.imageNotAllowed({
      image: describe(image),
      note: host.allowlist.size === 0 ? ' (the list is empty, which denies every image)' : '',
    })
  }
  if (
    !isPresetName(image) &&
    !host.isCustomImage(image) &&
    !looksLikeReference(image) &&
    !(await host.images.isRegistered(image))
  ) {
    throw errors.imageUnknown({
      subject: `image ${describe(image)}`,
      problem: `is neither a preset (${Object.keys(PRESETS).join(', ')}), one of the runtime's customImages, nor registered with images.register`,
    })
  }
  const cap = host.capsOf(image)
  if (cap && plan.cpus > cap.maxCpus)
    throw errors.overImageCap({ resource: 'cpus', value: plan.cpus, cap: cap.maxCpus, image })
  if (cap && plan.memoryMb > cap.maxMemoryMb)
    throw errors.overImageCap({ resource: 'memoryMb', value: plan.memoryMb, cap: cap.maxMemoryMb, image })
  const driver = chooseDriver(plan.driverChoice)
  if (from && !driver.capabilities.fork)
    throw errors.forkUnsupported({ driver: driver.name, snapshotId: from.id, see: 'docs/pool-and-snapshots.md' })
  const { networkPolicy } = driver.capabilities
  if (plan.network !== null && !networkPolicy.enforced) {
    throw errors.networkUnenforceable({ driver: driver.name, why: networkPolicy.why, fix: networkPolicy.fix })
  }
  return { driver, networkCap: host.networkCap(plan.network) }
}

/**
 * 3. A slot under maxConcurrentSandboxes. Taken synchronously, before the first await after the
 * checks; every failure from here on frees it (the handle's end releases it).
 */
async function reserveCapacity(host: CreateHost, signal: AbortSignal | undefined): Promise<() => void> {
  if (signal?.aborted) throw createAborted('before it started', signal)
  const slot = host.takeSlot(signal)
  return typeof slot === 'function' ? slot : await slot
}

/** 4. The caller's handle, tracked by the runtime, releasing its slot and snapshot holds when it ends or fails. */
function newHandle(host: CreateHost, plan: CreatePlan, placement: Placement, release: () => void): Boot {
  const { from } = plan
  const id = randomUUID()
  const accessToken = crypto.randomBytes(32).toString('base64url')
  const createdAt = Date.now()
  const expiresAt = plan.ttlMs === null ? null : createdAt + plan.ttlMs
  const maxExpiresAt = plan.ttlMs === null ? 0 : createdAt + host.defaults.maxTtlMs
  const sandbox = sandboxControl.create(
    {
      id,
      name: plan.name,
      image: plan.image,
      imageVersion: '',
      driver: placement.driver.name,
      metadata: plan.metadata,
      env: plan.env,
      expiresAt,
      idleTimeoutMs: plan.idleTimeoutMs,
      network: plan.network,
    },
    accessToken,
  )
  host.track(id, sandbox, release, !plan.detached)
  const unhold = from ? snapshotStoreControl.hold(host.snapshots, from.id) : () => {}
  sandboxControl.useSnapshots(sandbox, host.snapshots, from?.id ?? null, host.state.sandboxDir(id))
  const boot: Boot = {
    plan,
    placement,
    sandbox,
    id,
    accessToken,
    expiresAt,
    maxExpiresAt,
    forgetUser: () => {},
    imageUse: null,
  }
  sandbox.once('destroyed', () => {
    unhold()
    boot.forgetUser()
    host.release(id, sandbox)
  })
  sandbox.on('status', (s) => {
    if (s !== 'failed') return
    unhold()
    host.release(id, sandbox)
  })
  return boot
}

/** 5. The image, built on first use: progress goes to the caller's listener and the sandbox's event. */
async function resolveImage(host: CreateHost, boot: Boot): Promise<ResolvedImage> {
  const { plan, sandbox } = boot
  // A listener that throws must not fail the build (nor escape where nobody can catch it).
  const progress = (event: ProgressEvent) => {
    try {
      plan.onProgress?.(event)
      sandbox.emit('progress', event)
    } catch (err) {
      warnOnce('onProgress', `krunbox: a progress listener threw (ignored): ${(err as Error).message}`)
    }
  }
  const resolved = await host.resolveImage(plan.image, progress)
  if (plan.from && resolved.id !== plan.from.imageVersion) {
    throw errors.imageUnknown({
      subject: `snapshot ${plan.from.id}`,
      problem: `was made over ${plan.image} version ${plan.from.imageVersion}; that image is now ${resolved.id}`,
    })
  }
  if (boot.placement.driver.capabilities.hostIdsFromSubordinates)
    await assertImageUserMapped(plan.image, resolved.manifest, plan.user)
  // Marked before anything uses its files: no prune, of any process, deletes it from here on.
  boot.imageUse = await imageStoreControl.useImage(host.images, resolved.id, boot.id)
  if (boot.imageUse === null)
    throw errors.imageUnknown({
      subject: `image ${describe(plan.image)} version ${resolved.id}`,
      problem: 'was removed from the cache while this sandbox was being created; create it again',
    })
  sandboxControl.setImageVersion(sandbox, resolved.id)
  sandboxControl.useImageManifest(sandbox, () => Promise.resolve(resolved.manifest))
  sandboxControl.setStatus(sandbox, 'starting')
  return resolved
}

/** 6. The sandbox's entry in the state directory (its ctl/ is the one directory the sandbox sees). */
function prepareStateDir(host: CreateHost, boot: Boot): Promise<string> {
  return host.state.create(boot.id)
}

/** 7. The driver starts the sandbox process around the agent (ready comes later); a failed start retires the entry. */
async function startDriver(
  host: CreateHost,
  boot: Boot,
  resolved: ResolvedImage,
  sandboxDir: string,
): Promise<BootedSandbox> {
  const { plan, placement, id } = boot
  const { driver } = placement
  let booted: BootedSandbox
  try {
    booted = await driver.boot({
      id,
      hostname: `sb-${id.slice(0, 8)}`,
      imageRootfs: resolved.rootfs,
      ...(plan.from && { snapshotLayer: host.snapshots.layerDir(plan.from.id) }),
      sandboxDir,
      controlDir: host.state.controlDir(id),
      cpus: plan.cpus,
      memoryMb: plan.memoryMb,
      pidsMax: plan.pidsMax,
      network: plan.network,
      networkCap: placement.networkCap,
      detached: plan.detached,
      bootTimeoutMs: plan.bootTimeoutMs,
      agent: {
        mode: driver.capabilities.agentMode,
        sandboxId: id,
        image: plan.image,
        imageVersion: resolved.id,
        lowerDir: '/krunbox/image',
        ...(plan.from && { layerDir: '/krunbox/layer' }),
        upperSizeMb: plan.diskMb,
        tokenSha256: sha256(boot.accessToken),
        idleTimeoutMs: plan.idleTimeoutMs,
        expiresAt: boot.expiresAt ?? 0,
        // The caps sandbox.setLifetime holds to, fixed here so no client (nor a runtime with a larger maxTtlMs) goes past them.
        maxExpiresAt: boot.maxExpiresAt,
        maxIdleTimeoutMs: IDLE_TIMEOUT_MS.max,
        // An OCI image's config gives the defaults: Env under the caller's env, WorkingDir, User;
        // a preset's manifest its Env (the python presets' virtual environment on PATH).
        env: { ...(resolved.manifest.oci?.config.env ?? resolved.manifest.env), ...plan.env },
        pidsMax: plan.pidsMax,
        workspace: resolved.manifest.oci?.config.workingDir ?? '/workspace',
        user: plan.user ?? resolved.manifest.oci?.userSpec ?? undefined,
        capabilities: plan.capabilities,
        artifacts: plan.artifacts && {
          paths: plan.artifacts.paths,
          maxBytes: plan.artifacts.maxBytes,
          when: plan.artifacts.when,
        },
      },
    })
  } catch (err) {
    await host.state.retire(id, 'crashed')
    throw err
  }
  host.booted(id, booted)
  if (!booted.limits.enforced)
    warnOnce('limits', `krunbox: resource limits are not enforced by cgroups on this host: ${booted.limits.reason}`)
  return booted
}

/**
 * 8. The sandbox's record (for attach, list and sweep in any process), a fork's mark on its
 * snapshot, and its reaper: whoever ends the sandbox (TTL, crash, our death) leaves nothing
 * behind, even with no krunbox process left.
 */
async function record(host: CreateHost, boot: Boot, resolved: ResolvedImage, booted: BootedSandbox): Promise<void> {
  const { plan, id } = boot
  const entry: SandboxRecord = {
    id,
    name: plan.name,
    image: plan.image,
    imageVersion: resolved.id,
    driver: boot.placement.driver.name,
    pid: booted.pid,
    pidStartTime: processStartTime(booted.pid) ?? '',
    ownerPid: process.pid,
    createdAt: Date.now(),
    expiresAt: boot.expiresAt,
    idleTimeoutMs: plan.idleTimeoutMs,
    tokenSha256: sha256(boot.accessToken),
    detached: plan.detached,
    metadata: plan.metadata,
    env: plan.env,
    cgroupDirs: booted.limits.cgroupPaths,
    artifacts: plan.artifacts,
    network: plan.network,
  }
  await host.state.write(entry)
  if (entry.pidStartTime === '') return
  // The sandbox's process holds its image from now on, also when it outlives this one (detached).
  await boot.imageUse?.heldBy(booted.pid, entry.pidStartTime)
  const release = () => boot.imageUse?.release().catch(() => {})
  void booted.exited.then(release, release)
  if (plan.from)
    boot.forgetUser = snapshotStoreControl.recordUser(host.snapshots, plan.from.id, id, booted.pid, entry.pidStartTime)
  await spawnReaper({
    stateRoot: host.state.root,
    id,
    pid: booted.pid,
    pidStartTime: entry.pidStartTime,
    ownerPid: plan.detached ? null : process.pid,
    cgroupDirs: booted.limits.cgroupPaths,
    history: {
      name: plan.name,
      image: plan.image,
      createdAt: entry.createdAt,
      metadata: plan.metadata,
      ...(plan.artifacts && {
        artifactsTo: plan.artifacts.to,
        ...(plan.artifacts.dir && { artifactsDir: plan.artifacts.dir }),
      }),
    },
    artifacts: plan.artifacts,
  })
}

/**
 * 9. The record (8) is written while the agent boots, and the handshake goes within what is left
 * of the boot timeout: the host's disk and the reaper's start stay off the path to ready. Where the
 * socket listens from the start (BootedSandbox.listensEarly), the HELLO is sent at once and waits
 * in its queue for the agent, else once it is ready. Both settle before anything is undone, so a
 * failure of either (a boot that fails: the driver's error; an agent that never answers: S305)
 * ends the sandbox and retires a complete entry.
 */
async function recordAndHandshake(
  host: CreateHost,
  boot: Boot,
  resolved: ResolvedImage,
  booted: BootedSandbox,
  deadline: number,
): Promise<AgentConnection> {
  let bootFailed = false
  const connect = () =>
    AgentConnection.connect(booted.socketPath, {
      token: boot.accessToken,
      timeoutMs: Math.max(100, deadline - Date.now()),
    })
  const early = booted.listensEarly ? connect() : null
  early?.catch(() => {}) // settled below, once `ready` has; a rejection until then is not unhandled
  const [recorded, connected] = await Promise.allSettled([
    record(host, boot, resolved, booted),
    booted.ready.then(
      () => early ?? connect(),
      (err) => {
        bootFailed = true
        // A failed boot closed the socket under the early handshake: that is not the error to report.
        void early?.then(
          (connection) => connection.close(),
          () => {},
        )
        throw err
      },
    ),
  ])
  if (recorded.status === 'fulfilled' && connected.status === 'fulfilled') return connected.value
  if (connected.status === 'fulfilled') connected.value.close()
  await endBoot(host, boot, booted)
  if (bootFailed) throw (connected as PromiseRejectedResult).reason
  if (recorded.status === 'rejected') throw recorded.reason
  const err = (connected as PromiseRejectedResult).reason as Error
  throw errors.handshakeTimeout(
    { subject: `sandbox ${boot.id}`, problem: `booted but its agent did not complete the handshake: ${err.message}` },
    { cause: err },
  )
}

/**
 * 9 under the caller's signal: an abort kills the booting process, so the handshake fails and
 * undoes the boot; one that comes after the handshake undoes it here. Either way the create
 * rejects (S206) only once nothing of the sandbox is left.
 */
async function handshakeUnlessAborted(
  host: CreateHost,
  boot: Boot,
  resolved: ResolvedImage,
  booted: BootedSandbox,
  deadline: number,
): Promise<AgentConnection> {
  const { signal } = boot.plan
  const kill = () => booted.kill()
  signal?.addEventListener('abort', kill, { once: true })
  let connection: AgentConnection
  try {
    if (signal?.aborted) kill()
    connection = await recordAndHandshake(host, boot, resolved, booted, deadline)
  } finally {
    signal?.removeEventListener('abort', kill)
  }
  if (!signal?.aborted) return connection
  connection.close()
  await endBoot(host, boot, booted)
  throw createAborted('during its boot', signal)
}

/** Ends a sandbox that never went live: its process, what its driver set up, its state entry. */
async function endBoot(host: CreateHost, boot: Boot, booted: BootedSandbox): Promise<void> {
  booted.kill()
  await booted.exited
  await booted.cleanup()
  await host.state.retire(boot.id, 'crashed')
}

/** S206 for a create the caller aborted (its signal), saying when. */
export function createAborted(when: string, signal: AbortSignal | undefined): SandboxError {
  return errors.aborted(
    { subject: 'create()', problem: `was aborted by the caller ${when}` },
    { cause: signal?.reason },
  )
}

/** work, unless signal aborts first (work may still settle later; nobody waits for it then). */
function unlessAborted<T>(work: Promise<T>, signal: AbortSignal | undefined, when: string): Promise<T> {
  if (!signal) return work
  return new Promise((resolve, reject) => {
    const abort = () => reject(createAborted(when, signal))
    if (signal.aborted) return abort()
    signal.addEventListener('abort', abort, { once: true })
    const done = () => signal.removeEventListener('abort', abort)
    work.then(
      (value) => (done(), resolve(value)),
      (err) => (done(), reject(err)),
    )
  })
}

/** 10. The handle goes live: the network policy's host side, then the backend (status ready). */
function attach(host: CreateHost, boot: Boot, booted: BootedSandbox, connection: AgentConnection): void {
  if (booted.network) sandboxControl.attachNetwork(boot.sandbox, booted.network)
  sandboxControl.attachBackend(boot.sandbox, host.backend(boot.id, booted, connection, Boolean(boot.plan.artifacts)))
}
