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

/** The driver's bwrap. With a bad KRUNBOX_BWRAP, which the driver refuses with S302, the probe reports the one on PATH. */
function usableBubblewrap(): string | undefined {
  try {
    return bubblewrapPath() ?? undefined
  } catch {
    return undefined
  }
}

export type { HostProbe }
