/** `krunbox doctor`: the host probe in words. */
import type { ImageListEntry } from '../images/index.js'
import { libkrunTooOld, LIBKRUN_SYMBOLS_SINCE, type HostProbe } from '../probe.js'
import {
  APPARMOR_USERNS_FIXES,
  appArmorRestrictsUserns,
  installCommand,
  installHint,
  packageManager,
  REQUIREMENTS,
  subordinateIdsStatus,
} from '../host-requirements.js'

const yes = (b: boolean) => (b ? 'yes' : 'no')

export function doctorReport(p: HostProbe): string {
  const lines = [
    `architecture:            ${p.arch}`,
    `/dev/kvm present:        ${yes(p.kvm.devicePresent)}${p.kvm.devicePresent ? `, accessible: ${yes(p.kvm.accessible)}` : ''}`,
    `hardware virtualization: ${yes(p.kvm.hardwareVirt)} (vmx/svm in /proc/cpuinfo)`,
    `KVM backend:             ${p.kvm.backend ?? 'none loaded'}${p.kvm.softwareBackend ? ' (software emulation: microVMs cannot boot)' : ''}`,
    `libkrun:                 ${libkrunLine(p)}`,
    `libkrunfw:               ${p.libkrunfw.loadable ? `${p.libkrunfw.path} loads by name` : `${p.libkrunfw.path} does not load by name (libkrun loads it so): ${p.libkrunfw.error}`}`,
    `bubblewrap:              ${p.bubblewrap.path ? `${p.bubblewrap.path}${p.bubblewrap.version ? ` (${p.bubblewrap.version})` : ''}` : 'not found'}`,
    `cgroups:                 ${p.cgroup.mode}, ${p.cgroup.writable ? 'limits enforceable' : 'not writable: limits are reported, not enforced'}`,
    `user namespaces:         ${p.userns.unprivilegedAllowed ? 'allowed for unprivileged users' : appArmorRestrictsUserns() ? 'root only: AppArmor restricts them to profiled programs (kernel.apparmor_restrict_unprivileged_userns = 1, Ubuntu 24.04)' : 'root only'}`,
    '',
    p.krunUnavailableReason === null
      ? 'driver auto -> krun (microVMs)'
      : `driver auto -> namespace (bubblewrap); krun unavailable: ${p.krunUnavailableReason}`,
  ]
  return lines.join('\n') + '\n'
}

function libkrunLine(p: HostProbe): string {
  const { libkrun } = p
  if (!libkrun.loadable) return `not loadable: ${libkrun.error}`
  const where = `${libkrun.resolvedPath ?? libkrun.path}, ${libkrun.version ? `version ${libkrun.version}` : 'version unknown (its file name carries none)'}`
  if (libkrun.missingSymbols.length > 0) {
    const missing = libkrun.missingSymbols.map((s) => `${s} (since ${LIBKRUN_SYMBOLS_SINCE[s]})`).join(', ')
    return `too old (${where}): lacks ${missing}; libkrun ${libkrun.minimumVersion} or newer is required`
  }
  const old = libkrunTooOld(p)
  if (old) return `too old (${where}): it ${old}; libkrun ${libkrun.minimumVersion} or newer is required`
  const blob = libkrun.initBlob === false ? '; built WITHOUT its init blob: guests have no /init.krun' : ''
  return `loadable (${where}; minimum ${libkrun.minimumVersion}), every symbol krun-shim calls is there${blob}`
}

/**
 * One line per host tool a driver or the image builder needs, with the command that installs a
 * missing one (this host's package manager when known), then one command for all of them.
 * Needs no addon: it runs where the probe cannot.
 */
export function requirementsReport(
  host = { appArmorRestrictsUserns: appArmorRestrictsUserns(), root: process.getuid?.() === 0 },
): string {
  const manager = packageManager()
  const lines = ['host tools:']
  const missing: string[] = []
  for (const req of REQUIREMENTS) {
    const ok = req.present()
    lines.push(`  ${req.name.padEnd(28)} ${ok ? 'present' : `MISSING (${req.neededBy}): ${installHint(req, manager)}`}`)
    if (!ok && manager && req.packages[manager]) missing.push(req.packages[manager]!)
  }
  lines.push(`  ${'subordinate ids'.padEnd(28)} ${subordinateIdsLine()}`)
  if (missing.length > 1) lines.push(`  all missing at once: ${installCommand(manager!, missing)}`)
  if (host.appArmorRestrictsUserns && !host.root) {
    lines.push(
      '  user namespaces are restricted by AppArmor, so bwrap cannot make a sandbox for this user; the two known fixes:',
    )
    for (const fix of APPARMOR_USERNS_FIXES) lines.push(`    ${fix}`)
  }
  return lines.join('\n') + '\n'
}

function subordinateIdsLine(): string {
  const ids = subordinateIdsStatus()
  if (ids === null) return 'not needed (root)'
  if (ids.uids && ids.gids) return `present (${ids.user} has 65536 in /etc/subuid and /etc/subgid)`
  const lacking = [!ids.uids && '/etc/subuid', !ids.gids && '/etc/subgid'].filter(Boolean).join(' and ')
  return `MISSING (building images without root, and more than one id in a sandbox; none for ${ids.user} in ${lacking}): ${ids.fix}`
}

/** What the image cache holds, so a user knows which first use will build an image. */
export function cacheReport(cacheDir: string, entries: readonly ImageListEntry[], presets: readonly string[]): string {
  const lines = [`image cache:             ${cacheDir}`]
  for (const e of entries)
    lines.push(`  ${e.name.padEnd(22)} cached, ${(e.sizeBytes / 1048576).toFixed(1)} MiB (${e.id.slice(0, 12)})`)
  for (const name of presets) {
    if (entries.some((e) => e.name === name)) continue
    const lacking = REQUIREMENTS.filter((r) => r.neededBy.startsWith('building the preset images') && !r.present()).map(
      (r) => r.name,
    )
    const ids = subordinateIdsStatus()
    if (ids && !(ids.uids && ids.gids)) lacking.push('subordinate ids')
    lines.push(
      `  ${name.padEnd(22)} not cached: ${lacking.length === 0 ? 'built on first use' : `cannot be built here without ${lacking.join(' and ')} (see host tools above)`}`,
    )
  }
  return lines.join('\n') + '\n'
}
