/**
 * An image's own command: its config's Entrypoint followed by its Cmd (Docker's rule when no
 * command is given), or null when the image says neither (presets, custom trees).
 */
import type { ImageManifest } from '../types.js'

export function imageCommand(manifest: ImageManifest): string[] | null {
  const config = manifest.oci?.config
  if (config === undefined) return null
  const argv = [...(config.entrypoint ?? []), ...(config.cmd ?? [])]
  return argv.length === 0 ? null : argv
}
