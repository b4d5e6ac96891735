/**
 * Driver selection. 'auto' boots microVMs where the host can (hardware KVM + a loadable
 * libkrun), else namespaces, and says which once. 'krun' on a host that can't boot fails
 * at once with the missing piece named, never after a boot attempt.
 */
import { SandboxError } from '../errors.js'
import { hostProbe } from '../probe.js'
import { KrunDriver } from './krun.js'
import { NamespaceDriver } from './namespace.js'
import type { Driver } from './types.js'

const namespaceDriver = new NamespaceDriver()
let krunDriver: KrunDriver | null = null
let announced = false

export function chooseDriver(choice: 'auto' | 'namespace' | 'krun'): Driver {
  if (choice === 'namespace') return namespaceDriver
  if (choice === 'krun') {
    const reason = krunUnavailableReason()
    if (reason) throw new SandboxError('S301', `driver 'krun' cannot boot on this host: ${reason}`)
    return (krunDriver ??= new KrunDriver())
  }
  const reason = hostProbe().krunUnavailableReason
  if (reason === null) return (krunDriver ??= new KrunDriver())
  if (!announced) {
    announced = true
    process.emitWarning(`krunbox: using the namespace driver (bubblewrap) because microVMs cannot boot here: ${reason}`, { code: 'KRUNBOX_DRIVER' })
  }
  return namespaceDriver
}

/**
 * Why 'krun' cannot boot here, or null. KRUNBOX_KRUN_ASSUME_USABLE=1 is for tests with the
 * libkrun test double: it skips the hardware checks (KVM), but libkrun must still load.
 */
function krunUnavailableReason(): string | null {
  const probe = hostProbe()
  if (process.env.KRUNBOX_KRUN_ASSUME_USABLE !== '1') return probe.krunUnavailableReason
  return probe.libkrun.loadable ? null : `libkrun cannot be loaded from ${probe.libkrun.path}: ${probe.libkrun.error}`
}
