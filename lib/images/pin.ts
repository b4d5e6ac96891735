/**
 * An image pinned to one version: `<image>@<id>`, where `<image>` is what create() was given (a
 * preset, a custom or registered name, a pulled reference) and `<id>` the 64 hex digits of the
 * version it resolved to, the sandbox's `imageVersion`. `python@<id>` boots exactly that build
 * while it is in the cache, whatever `python` points to since. An OCI digest keeps its
 * `sha256:` (`repo@sha256:…` pins a manifest, as before): an id comes bare, so the two never
 * meet (`python@sha256:…` already means Docker Hub's python).
 */
const PINNED = /^(.+)@([0-9a-f]{64})$/

export interface ImagePin {
  /** The image without its pin. */
  image: string
  /** The pinned version (an image id), or null. */
  version: string | null
}

export function splitPin(image: string): ImagePin {
  const m = PINNED.exec(image)
  return m === null ? { image, version: null } : { image: m[1], version: m[2] }
}
