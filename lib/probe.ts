/**
 * The host probe, cached: which drivers can run here and why not. The native part looks at
 * KVM, bubblewrap, cgroups and user namespaces; the libraries are checked by `krun-shim --check`
 * in the very environment a VM's shim gets, because that is where libkrun will load: every
 * symbol the shim calls must be there, and libkrunfw.so.5 must load BY NAME (libkrun dlopens it
 * through the loader's search path, whatever directory libkrun itself came from).
 */
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import { shimEnv } from './drivers/krun-shim-env.js'
import { krunShimPath, loadNative, type HostProbe } from './native.js'
import { bubblewrapPath } from './paths.js'

/** The libkrun release that first has each symbol krun-shim calls (from libkrun's include/libkrun.h by tag). */
export const LIBKRUN_SYMBOLS_SINCE: Record<string, string> = {
  krun_set_log_level: '1.0.0',
  krun_create_ctx: '1.0.0',
  krun_set_vm_config: '1.0.0',
  krun_set_root: '1.0.0',
  krun_add_virtiofs3: '1.18.0',
  krun_set_exec: '1.0.0',
  krun_disable_implicit_vsock: '1.17.0',
  krun_add_vsock: '1.17.0',
  krun_add_vsock_port2: '1.10.0',
  krun_set_console_output: '1.8.0',
  krun_start_enter: '1.0.0',
}
/**
 * The oldest libkrun krunbox accepts. 1.18.0 has every symbol, but stalls guest→host vsock
 * traffic after about 256 KiB (exec output, readFile, downloads would hang): libkrun#772, fixed
 * in 1.18.1 by 1bebfaac ("virtio/vsock: use device's peer_buf_alloc").
 */
export const LIBKRUN_MINIMUM_VERSION = '1.18.1'
/** Known-bad releases that pass the symbol check, and why. */
const LIBKRUN_KNOWN_BAD: Record<string, string> = {
  '1.18.0': 'stalls guest→host vsock traffic after about 256 KiB (libkrun#772, fixed in 1.18.1 by 1bebfaac)',
}
const LIBKRUNFW = 'libkrunfw.so.5'

let cached: HostProbe | null = null

export function hostProbe(options?: { refresh?: boolean }): HostProbe {
  if (!cached || options?.refresh) {
    const libkrunPath = process.env.KRUNBOX_LIBKRUN_PATH || 'libkrun.so.1'
    const native = loadNative().probe({ libkrunPath, bubblewrapPath: usableBubblewrap() })
    const libraries = checkLibraries(libkrunPath)
    const probe = { ...native, ...libraries }
    probe.krunUnavailableReason = hardwareReason(probe) ?? libraryReason(probe)
    cached = probe
  }
  return cached
}

/** Why the host's hardware cannot boot a microVM, or null (the order `krunbox doctor` explains). */
export function hardwareReason(p: HostProbe): string | null {
  const { kvm } = p
  if (kvm.softwareBackend)
    return `software KVM backend ${kvm.backend}${kvm.hardwareVirt ? '' : ' (no vmx/svm hardware virtualization in /proc/cpuinfo)'}`
  if (!kvm.hardwareVirt) return 'no vmx/svm (hardware virtualization) in /proc/cpuinfo'
  if (!kvm.devicePresent) return 'no /dev/kvm device'
  if (!kvm.accessible) return 'no access to /dev/kvm (is this user in its group?)'
  return null
}

/** Why libkrun or libkrunfw will not work here, or null: every missing piece, with the release that has it. */
export function libraryReason(p: HostProbe): string | null {
  const problems: string[] = []
  const file = p.libkrun.resolvedPath ?? p.libkrun.path
  if (!p.libkrun.loadable) problems.push(`${p.libkrun.path} cannot be loaded: ${p.libkrun.error}`)
  else if (p.libkrun.missingSymbols.length > 0) {
    const since = p.libkrun.missingSymbols.map((s) => `${s} (since ${LIBKRUN_SYMBOLS_SINCE[s]})`).join(', ')
    problems.push(`${file} lacks ${since}: libkrun ${LIBKRUN_MINIMUM_VERSION} or newer is required`)
  } else if (libkrunTooOld(p)) {
    problems.push(
      `${file} is libkrun ${p.libkrun.version}, which ${libkrunTooOld(p)}: install libkrun ${LIBKRUN_MINIMUM_VERSION} or newer`,
    )
  }
  if (p.libkrun.loadable && p.libkrun.initBlob === false) {
    problems.push(
      `${file} was built without its init blob (krun_has_feature(KRUN_FEATURE_INIT_BLOB) is 0), so a guest has no /init.krun and ends at boot: use a libkrun built with its default "init-blob" feature`,
    )
  }
  if (!p.libkrunfw.loadable) {
    const beside = besideLibkrun(p.libkrun.resolvedPath ?? p.libkrun.path)
    problems.push(
      `${LIBKRUNFW} does not load by name (${p.libkrunfw.error})${beside ? `; there is one at ${beside}, but libkrun loads it through the loader's search path only` : ''}: ` +
        `run ldconfig for its directory (e.g. /etc/ld.so.conf.d/krun.conf) or set LD_LIBRARY_PATH`,
    )
  }
  return problems.length === 0 ? null : problems.join('; ')
}

/** Why the loaded libkrun's version is below the floor, or null (also null when its version is unknown). */
export function libkrunTooOld(p: HostProbe): string | null {
  const { version } = p.libkrun
  if (version === null || compareVersions(version, LIBKRUN_MINIMUM_VERSION) >= 0) return null
  return LIBKRUN_KNOWN_BAD[version] ?? `is older than ${LIBKRUN_MINIMUM_VERSION}`
}

interface ShimCheck {
  /** file: the real path of the library the loader loaded; initBlob: see HostProbe */
  libkrun: {
    loadable: boolean
    error: string | null
    missing: string[]
    file?: string | null
    initBlob?: boolean | null
  }
  libkrunfw: { loadable: boolean; error: string | null }
}

function checkLibraries(libkrunPath: string): Pick<HostProbe, 'libkrun' | 'libkrunfw'> {
  const run = spawnSync(krunShimPath(), ['--check', libkrunPath], { env: shimEnv(), encoding: 'utf8', timeout: 10_000 })
  let check: ShimCheck
  try {
    check = JSON.parse(run.stdout) as ShimCheck
  } catch {
    const why = run.error?.message ?? `krun-shim --check exited with ${run.status ?? run.signal}: ${run.stderr.trim()}`
    check = { libkrun: { loadable: false, error: why, missing: [] }, libkrunfw: { loadable: false, error: why } }
  }
  // The file the loader picked in the shim's environment (whatever name it was asked for).
  const resolvedPath = check.libkrun.loadable ? (check.libkrun.file ?? null) : null
  return {
    libkrun: {
      loadable: check.libkrun.loadable,
      path: libkrunPath,
      resolvedPath,
      version: resolvedPath ? versionFromFileName(resolvedPath) : null,
      error: check.libkrun.error,
      missingSymbols: check.libkrun.missing,
      minimumVersion: LIBKRUN_MINIMUM_VERSION,
      initBlob: check.libkrun.initBlob ?? null,
    },
    libkrunfw: { loadable: check.libkrunfw.loadable, path: LIBKRUNFW, error: check.libkrunfw.error },
  }
}

/** libkrun.so.1.18.0 → '1.18.0' (libkrun has no version call; its packages install the real file so named). */
function versionFromFileName(file: string): string | null {
  return /^libkrun\.so\.(\d+\.\d+\.\d+)$/.exec(path.basename(file))?.[1] ?? null
}

/** Negative when a < b, for dotted numeric versions. */
export function compareVersions(a: string, b: string): number {
  const x = a.split('.').map(Number)
  const y = b.split('.').map(Number)
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0)
    if (d !== 0) return d
  }
  return 0
}

function besideLibkrun(libkrunPath: string): string | null {
  if (!path.isAbsolute(libkrunPath)) return null
  const candidate = path.join(path.dirname(libkrunPath), LIBKRUNFW)
  return fs.existsSync(candidate) ? candidate : null
}

/** The driver's bwrap. With a bad KRUNBOX_BWRAP, which the driver refuses with S302, the probe reports the one on PATH. */
function usableBubblewrap(): string | undefined {
  try {
    return bubblewrapPath() ?? undefined
  } catch {
    return undefined
  }
}

export type { HostProbe }
