/** `krunbox doctor`: the host probe in words. */
import type { HostProbe } from '../probe.js'

const yes = (b: boolean) => (b ? 'yes' : 'no')

export function doctorReport(p: HostProbe): string {
  const lines = [
    `architecture:            ${p.arch}`,
    `/dev/kvm present:        ${yes(p.kvm.devicePresent)}${p.kvm.devicePresent ? `, accessible: ${yes(p.kvm.accessible)}` : ''}`,
    `hardware virtualization: ${yes(p.kvm.hardwareVirt)} (vmx/svm in /proc/cpuinfo)`,
    `KVM backend:             ${p.kvm.backend ?? 'none loaded'}${p.kvm.softwareBackend ? ' (software emulation: microVMs cannot boot)' : ''}`,
    `libkrun:                 ${p.libkrun.loadable ? `loadable (${p.libkrun.path}${p.libkrun.version ? `, ${p.libkrun.version}` : ''})` : `not loadable: ${p.libkrun.error}`}`,
    `libkrunfw:               ${p.libkrunfw.loadable ? 'loadable' : `not loadable: ${p.libkrunfw.error}`}`,
    `bubblewrap:              ${p.bubblewrap.path ? `${p.bubblewrap.path}${p.bubblewrap.version ? ` (${p.bubblewrap.version})` : ''}` : 'not found'}`,
    `cgroups:                 ${p.cgroup.mode}, ${p.cgroup.writable ? 'limits enforceable' : 'not writable: limits are reported, not enforced'}`,
    `user namespaces:         ${p.userns.unprivilegedAllowed ? 'allowed for unprivileged users' : 'root only'}`,
    '',
    p.krunUnavailableReason === null
      ? 'driver auto -> krun (microVMs)'
      : `driver auto -> namespace (bubblewrap); krun unavailable: ${p.krunUnavailableReason}`,
  ]
  return lines.join('\n') + '\n'
}
