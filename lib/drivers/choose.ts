/**
 * Driver selection. 'auto' boots microVMs where the host can (hardware KVM, a libkrun with every
 * symbol the shim calls, libkrunfw loadable by name), else namespaces, and says why (once per
 * reason: a process warning when a libkrun is there but unusable, NODE_DEBUG=krunbox otherwise). 'krun' on a host that can't boot fails at once with the missing piece named, never
 * after a boot attempt: S301 for the hardware, S311 for the libraries.
 */
import { debuglog } from 'node:util'
import { SandboxError } from '../errors.js'
import { hardwareReason, hostProbe, libraryReason } from '../probe.js'
import { KrunDriver } from './krun.js'
import { NamespaceDriver } from './namespace.js'
import type { Driver } from './types.js'
import { MESSAGES } from '../protocol/contract.gen.js'

const namespaceDriver = new NamespaceDriver()
let krunDriver: KrunDriver | null = null
const announced = new Set<string>()

export function chooseDriver(choice: 'auto' | 'namespace' | 'krun'): Driver {
  if (choice === 'namespace') return namespaceDriver
  const hardware = assumeUsable() ? null : hardwareReason(hostProbe())
  const libraries = libraryReason(hostProbe())
  if (choice === 'krun') {
    if (hardware) throw new SandboxError('S301', MESSAGES.krunUnavailable({ reason: hardware }))
    if (libraries) throw new SandboxError('S311', MESSAGES.krunUnusable({ subject: "driver 'krun'", problem: `cannot boot on this host: ${libraries}` }))
    return (krunDriver ??= new KrunDriver())
  }
  const reason = hardware ?? libraries
  if (reason === null) return (krunDriver ??= new KrunDriver())
  if (!announced.has(reason)) {
    announced.add(reason)
    const message = `krunbox: using the namespace driver (bubblewrap) because microVMs cannot boot here: ${reason}`
    // A host with no hardware KVM or no libkrun is the ordinary case: namespaces are the driver
    // it has, and no process should print that each time (doctor and NODE_DEBUG=krunbox say why).
    // A libkrun that is there but unusable on a host that could boot is a setup gone wrong: said.
    if (hardware === null && (hostProbe().libkrun.loadable || process.env.KRUNBOX_LIBKRUN_PATH !== undefined)) {
      process.emitWarning(message, { code: 'KRUNBOX_DRIVER' })
    } else {
      debug(message)
    }
  }
  return namespaceDriver
}

const debug = debuglog('krunbox')

/** KRUNBOX_KRUN_ASSUME_USABLE=1 is for tests with the libkrun test double: it skips the hardware checks, never the libraries. */
function assumeUsable(): boolean {
  return process.env.KRUNBOX_KRUN_ASSUME_USABLE === '1'
}
