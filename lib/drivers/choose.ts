/**
 * Driver selection. A driver chosen by name is asked first whether it can boot here
 * (Driver.assertUsable: krun fails at once with the missing piece named, S301 for the hardware,
 * S311 for the libraries, never after a boot attempt). 'auto' boots microVMs where the host can
 * (krun-usable.ts), else namespaces, and says why (once per reason: a process warning when a
 * libkrun is there but unusable, NODE_DEBUG=krunbox otherwise).
 */
import { debuglog } from 'node:util'
import { hostProbe } from '../probe.js'
import { krunHardwareProblem, krunUnusableReason } from './krun-usable.js'
import type { DriverChoice } from './names.js'
import { DRIVERS } from './registry.js'
import type { Driver } from './types.js'

const announced = new Set<string>()
const debug = debuglog('krunbox')

export function chooseDriver(choice: DriverChoice): Driver {
  if (choice !== 'auto') {
    const driver = DRIVERS[choice]
    driver.assertUsable?.()
    return driver
  }
  const reason = krunUnusableReason()
  if (reason === null) return DRIVERS.krun
  if (!announced.has(reason)) {
    announced.add(reason)
    const message = `krunbox: using the namespace driver (bubblewrap) because microVMs cannot boot here: ${reason}`
    // A host with no hardware KVM or no libkrun is the ordinary case: namespaces are the driver
    // it has, and no process should print that each time (doctor and NODE_DEBUG=krunbox say why).
    // A libkrun that is there but unusable on a host that could boot is a setup gone wrong: said.
    if (
      krunHardwareProblem() === null &&
      (hostProbe().libkrun.loadable || process.env.KRUNBOX_LIBKRUN_PATH !== undefined)
    ) {
      process.emitWarning(message, { code: 'KRUNBOX_DRIVER' })
    } else {
      debug(message)
    }
  }
  return DRIVERS.namespace
}
