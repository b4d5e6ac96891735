/**
 * An image's own command: its config's Entrypoint followed by the given args, or else its Cmd
 * (Docker's rule: arguments replace Cmd, never Entrypoint), or null when that leaves nothing to
 * run (presets and custom trees say neither).
 */
import type { ImageManifest } from '../types.js'

export function imageCommand(manifest: ImageManifest, args?: readonly string[]): string[] | null {
  const config = manifest.oci?.config
  const argv = [...(config?.entrypoint ?? []), ...(args ?? config?.cmd ?? [])]
  return argv.length === 0 ? null : argv
}
