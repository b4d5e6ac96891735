/** The host probe (native), cached: which drivers can run here and why not. */
import { loadNative, type HostProbe } from './native.js'
import { bubblewrapPath } from './paths.js'

let cached: HostProbe | null = null

export function hostProbe(options?: { refresh?: boolean }): HostProbe {
  if (!cached || options?.refresh) {
    cached = loadNative().probe({ libkrunPath: process.env.KRUNBOX_LIBKRUN_PATH, bubblewrapPath: usableBubblewrap() })
  }
  return cached
}

/** The driver's bwrap; a bad KRUNBOX_BWRAP is reported by the driver (S302), here it is just none. */
function usableBubblewrap(): string | undefined {
  try {
    return bubblewrapPath() ?? undefined
  } catch {
    return undefined
  }
}

export type { HostProbe }
