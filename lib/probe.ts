/** The host probe (native), cached: which drivers can run here and why not. */
import { loadNative, type HostProbe } from './native.js'

let cached: HostProbe | null = null

export function hostProbe(options?: { refresh?: boolean }): HostProbe {
  if (!cached || options?.refresh) cached = loadNative().probe({ libkrunPath: process.env.KRUNBOX_LIBKRUN_PATH })
  return cached
}
export type { HostProbe }
