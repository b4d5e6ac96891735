/**
 * Whether this host can boot krun microVMs: hardware KVM, a libkrun with every symbol the shim
 * calls, libkrunfw loadable by name. Asked by an explicit choice of the driver (which fails at
 * once, naming the missing piece) and by 'auto' (which falls back, saying why).
 */
import { hardwareReason, hostProbe, libraryReason } from '../probe.js'
import { errors } from '../protocol/errors.gen.js'

/** Why microVMs cannot boot here (the hardware first), or null. */
export function krunUnusableReason(): string | null {
  return krunHardwareProblem() ?? libraryReason(hostProbe())
}

/** S301 for the hardware, S311 for the libraries. */
export function assertKrunUsable(): void {
  const hardware = krunHardwareProblem()
  if (hardware) throw errors.krunUnavailable({ reason: hardware })
  const libraries = libraryReason(hostProbe())
  if (libraries)
    throw errors.krunUnusable({ subject: "driver 'krun'", problem: `cannot boot on this host: ${libraries}` })
}

/**
 * Why the hardware cannot run microVMs (KVM), or null. KRUNBOX_KRUN_ASSUME_USABLE=1 is for tests
 * with the libkrun test double: it skips the hardware checks, never the libraries.
 */
export function krunHardwareProblem(): string | null {
  return process.env.KRUNBOX_KRUN_ASSUME_USABLE === '1' ? null : hardwareReason(hostProbe())
}
