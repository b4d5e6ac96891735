/**
 * Every driver by name. A driver is one entry here and its file beside this one; nothing outside
 * lib/drivers/ names one. The mapped type makes a name in DRIVER_NAMES without a driver (or the
 * reverse) a compile error.
 */
import { KrunDriver } from './krun.js'
import { NamespaceDriver } from './namespace.js'
import { DRIVER_NAMES, type DriverName } from './names.js'
import type { Driver } from './types.js'

export const DRIVERS: { readonly [N in DriverName]: Driver & { readonly name: N } } = {
  namespace: new NamespaceDriver(),
  krun: new KrunDriver(),
}

/** Basenames of every driver's sandbox process (state.ts: liveness where no cgroup says). */
export const SANDBOX_PROCESS_EXECUTABLES: ReadonlySet<string> = new Set(
  DRIVER_NAMES.map((name) => DRIVERS[name].capabilities.processExecutable),
)
