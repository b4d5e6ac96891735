/**
 * A Runtime's configuration: its type, and its check into the settings the runtime runs with
 * (every field validated in a fixed order, every default filled in). Pools are checked by the
 * runtime itself, against its snapshot store.
 */
import { CPUS, IDLE_TIMEOUT_MS, MAX_CONCURRENT_SANDBOXES, MAX_TTL_MS, MEMORY_MB } from './defaults.js'
import { SandboxError } from './errors.js'
import { NAME_PATTERN } from './images/cache.js'
import { looksLikeReference, parseReference } from './images/oci/reference.js'
import { ImageStore, isPresetName, PRESETS, type ImageSource } from './images/index.js'
import { parseNetworkAllowlist } from './network/policy.js'
import {
  assertString,
  describe,
  intInRange,
  optionalBoolean,
  optionalString,
  optionsObject,
  stringArray,
} from './options.js'
import { defaultStateDir } from './paths.js'
import type { PoolOptions } from './pool.js'
import { errors } from './protocol/errors.gen.js'

/** Upper bounds for one image, enforced on every create() of it (S400 when exceeded). */
export interface ImageCaps {
  /** Most virtual CPUs a sandbox of this image may ask for. Default 256. */
  maxCpus: number
  /** Most memory, in MiB, a sandbox of this image may ask for. Default 1 048 576 (1 TiB). */
  maxMemoryMb: number
}

/** Configuration of a {@link Runtime}; every field is optional. Unknown keys are rejected (S001). Defaults and bounds: lib/defaults.ts. */
export interface RuntimeConfig {
  /**
   * Images that may be booted. Fail-closed: `[]` denies everything. Entries must be presets,
   * names of `customImages` or OCI references such as `ghcr.io/acme/app:1.2.3` (S103 otherwise;
   * `python:3.12-slim` and `docker.io/library/python:3.12-slim` are the same entry). Default: no
   * list, every preset, custom, registered and referenced image may be booted.
   */
  imageAllowlist?: string[]
  /**
   * Custom images by name: an OCI reference (`registry/repo:tag`, `…@sha256:…`), a directory or
   * tarball path (`.tar`, `.tar.gz`, `.tgz`, `.tar.zst`), `{ path }`, or a recipe `{ base,
   * packages, files }`. Pulled, copied or built into the cache on first use. Names of presets
   * are refused (S107). Images added later with `images.register` boot too.
   */
  customImages?: Record<string, ImageSource>
  /**
   * Build or pull an image on its first use (true, default); false: one not in the cache is S101
   * naming it and nothing is built or pulled (first `krunbox images build` a preset, `krunbox images
   * pull` a reference, `images.register` a `customImages` name).
   */
  autoInstall?: boolean
  /** Registries (host[:port]) spoken to over plain HTTP; loopback registries always are, every other over HTTPS. */
  insecureRegistries?: string[]
  /** Most sandboxes this runtime keeps alive at once. 1–4096, default 32. */
  maxConcurrentSandboxes?: number
  /** At `maxConcurrentSandboxes`: wait for a slot in arrival order (true) or fail with S401 (false). Default false. */
  queue?: boolean
  /** CPUs of a sandbox when create() gives none. 1–256, default 1. */
  defaultCpus?: number
  /** Memory of a sandbox, in MiB, when create() gives none. 32–1 048 576, default 512. */
  defaultMemoryMb?: number
  /** Per-image caps on cpus and memoryMb, by image name. */
  perImageCaps?: Record<string, ImageCaps>
  /**
   * Idle timeout, in ms, of every sandbox whose create() gives none: a sandbox with no command
   * running and no call for this long ends itself (reason `idle_expired`), whether this process
   * owns it or it is detached. 0 disables it. 0–604 800 000 (7 days), default 300 000 (5 minutes).
   */
  defaultIdleTimeoutMs?: number
  /** Largest `ttlMs` create() accepts (S402 above it), in ms. 1 000–31 536 000 000, default 86 400 000 (24 h). */
  maxTtlMs?: number
  /** Where sandbox records, sockets and history live. Default `${XDG_STATE_HOME:-~/.local/state}/krunbox/sandboxes`. */
  stateDir?: string
  /** Image cache root. Default `${XDG_CACHE_HOME:-~/.cache}/krunbox/images`. */
  cacheDir?: string
  /**
   * How presets are built: `suite`, the Debian suite they come from (part of their ids): default
   * `trixie` (Debian's current stable), `bookworm` the previous one (docs/images.md).
   */
  images?: { suite?: string }
  /** Warm pools started with the runtime (see pool()). */
  pools?: PoolOptions[]
  /** Caps the network any sandbox may ask for (entries as in network.allow). Fail-closed: [] denies every network. Default: no cap. */
  networkAllowlist?: string[]
}

const CONFIG_KEYS = [
  'imageAllowlist',
  'customImages',
  'maxConcurrentSandboxes',
  'queue',
  'defaultCpus',
  'defaultMemoryMb',
  'perImageCaps',
  'defaultIdleTimeoutMs',
  'maxTtlMs',
  'stateDir',
  'cacheDir',
  'pools',
  'networkAllowlist',
  'autoInstall',
  'insecureRegistries',
  'images',
] as const

/** A custom image's source as the config gives it: a path, { path } or a recipe object (checked in full when first used). */
function customImageSource(name: string, source: unknown): ImageSource {
  if (typeof source === 'string') {
    assertString(source, `customImages.${name}`)
    return canonicalIfReference(source, `customImages.${name}`)
  }
  if (typeof source !== 'object' || source === null || Array.isArray(source)) {
    throw errors.badRuntimeConfig({
      subject: `customImages.${name}`,
      problem: `must be a path, { path } or a recipe { base, packages, files }, got ${describe(source)}`,
    })
  }
  const o = source as Record<string, unknown>
  if ('path' in o) {
    optionsObject(o, `customImages.${name}`, ['path'])
    assertString(o.path, `customImages.${name}.path`)
  } else if (!('base' in o)) {
    throw errors.badRuntimeConfig({
      subject: `customImages.${name}`,
      problem: 'must be a path, { path } or a recipe { base, packages, files }, got an object without path or base',
    })
  }
  return source as ImageSource
}

/** A config entry naming an image: a reference in its canonical spelling (python:3 is docker.io/library/python:3), S103 when malformed; anything else as it is. */
function canonicalIfReference(entry: string, subject: string): string {
  if (!looksLikeReference(entry)) return entry
  try {
    return parseReference(entry).canonical
  } catch (err) {
    throw errors.badRuntimeConfig({ subject, problem: (err as SandboxError).toJSON().message })
  }
}

/** The configuration, checked: what a Runtime runs with. */
export interface RuntimeSettings {
  images: ImageStore
  /** Pull OCI images on first use; false: a missing one is S101. */
  autoInstall: boolean
  /** Custom images from the config, registered (copied or built into the cache) on first use. */
  customSources: Map<string, ImageSource>
  /** The image allowlist, canonical spellings (null: none). */
  allowlist: Set<string> | null
  maxConcurrent: number
  queue: boolean
  /** What create() uses where its options give nothing, and the TTL cap. */
  defaults: { cpus: number; memoryMb: number; idleTimeoutMs: number; maxTtlMs: number }
  caps: Record<string, ImageCaps>
  networkAllowlist: string[] | null
  stateDir: string
  /** As given: the runtime checks each against its snapshot store. */
  pools: unknown
}

/** The runtime config checked, S001/S103/S107 naming the first bad field. */
export function parseRuntimeConfig(config: unknown): RuntimeSettings {
  const c = optionsObject(config, 'runtime config', CONFIG_KEYS)
  const suite = optionalString(optionsObject(c.images ?? {}, 'images', ['suite']).suite, 'images.suite')
  const images = new ImageStore({
    cacheDir: optionalString(c.cacheDir, 'cacheDir'),
    ...(suite !== undefined && { suite }),
    ...(c.insecureRegistries !== undefined && {
      insecureRegistries: stringArray(c.insecureRegistries, 'insecureRegistries'),
    }),
  })
  const autoInstall = optionalBoolean(c.autoInstall, 'autoInstall', true)
  const customSources = new Map<string, ImageSource>()
  if (c.customImages !== undefined) {
    if (typeof c.customImages !== 'object' || c.customImages === null)
      throw errors.badRuntimeConfig({
        subject: 'customImages',
        problem: `must be an object, got ${describe(c.customImages)}`,
      })
    for (const [name, source] of Object.entries(c.customImages)) {
      if (isPresetName(name))
        throw errors.imageNameClash({
          subject: `custom image ${describe(name)}`,
          problem: 'would shadow the preset of the same name',
        })
      if (!NAME_PATTERN.test(name))
        throw errors.badRuntimeConfig({
          subject: `custom image name ${describe(name)}`,
          problem: 'must be 1-64 of a-z 0-9 . _ - starting with a letter or digit',
        })
      customSources.set(name, customImageSource(name, source))
    }
  }
  const allowlist =
    c.imageAllowlist === undefined
      ? null
      : new Set(
          stringArray(c.imageAllowlist, 'imageAllowlist').map((entry) =>
            canonicalIfReference(entry, `imageAllowlist entry ${describe(entry)}`),
          ),
        )
  for (const name of allowlist ?? []) {
    // A misspelt entry would silently deny the image meant; only bootable names may be listed.
    if (!isPresetName(name) && !customSources.has(name) && !looksLikeReference(name)) {
      throw errors.badRuntimeConfig({
        subject: `imageAllowlist entry ${describe(name)}`,
        problem: `is neither a preset (${Object.keys(PRESETS).join(', ')}) nor one of customImages`,
      })
    }
  }
  const maxConcurrent = intInRange(
    c.maxConcurrentSandboxes,
    'maxConcurrentSandboxes',
    MAX_CONCURRENT_SANDBOXES.min,
    MAX_CONCURRENT_SANDBOXES.max,
    MAX_CONCURRENT_SANDBOXES.default,
  )
  const queue = optionalBoolean(c.queue, 'queue', false)
  const cpus = intInRange(c.defaultCpus, 'defaultCpus', CPUS.min, CPUS.max, CPUS.default)
  const memoryMb = intInRange(c.defaultMemoryMb, 'defaultMemoryMb', MEMORY_MB.min, MEMORY_MB.max, MEMORY_MB.default)
  const caps: Record<string, ImageCaps> = {}
  if (c.perImageCaps !== undefined) {
    if (typeof c.perImageCaps !== 'object' || c.perImageCaps === null)
      throw errors.badRuntimeConfig({
        subject: 'perImageCaps',
        problem: `must be an object, got ${describe(c.perImageCaps)}`,
      })
    for (const [name, cap] of Object.entries(c.perImageCaps as Record<string, unknown>)) {
      const o = optionsObject(cap, `perImageCaps.${name}`, ['maxCpus', 'maxMemoryMb'])
      caps[name] = {
        maxCpus: intInRange(o.maxCpus, `perImageCaps.${name}.maxCpus`, CPUS.min, CPUS.max, CPUS.max),
        maxMemoryMb: intInRange(
          o.maxMemoryMb,
          `perImageCaps.${name}.maxMemoryMb`,
          MEMORY_MB.min,
          MEMORY_MB.max,
          MEMORY_MB.max,
        ),
      }
    }
  }
  const idleTimeoutMs = intInRange(
    c.defaultIdleTimeoutMs,
    'defaultIdleTimeoutMs',
    IDLE_TIMEOUT_MS.min,
    IDLE_TIMEOUT_MS.max,
    IDLE_TIMEOUT_MS.default,
  )
  const maxTtlMs = intInRange(c.maxTtlMs, 'maxTtlMs', MAX_TTL_MS.min, MAX_TTL_MS.max, MAX_TTL_MS.default)
  const networkAllowlist = parseNetworkAllowlist(c.networkAllowlist)
  const stateDir = optionalString(c.stateDir, 'stateDir') ?? defaultStateDir()
  return {
    images,
    autoInstall,
    customSources,
    allowlist,
    maxConcurrent,
    queue,
    defaults: { cpus, memoryMb, idleTimeoutMs, maxTtlMs },
    caps,
    networkAllowlist,
    stateDir,
    pools: c.pools,
  }
}
