/**
 * The image the code interpreter's tests run on: the code-interpreter preset, built once on
 * first use and shared by every test file through the image cache (its build lock makes the
 * others wait for it).
 */
import type { Runtime } from '../../lib/runtime.js'

export const CODE_IMAGE = 'code-interpreter'

/** Builds the image if the cache lacks it and returns its name. */
export async function codeImage(rt: Runtime): Promise<string> {
  await rt.images.resolve(CODE_IMAGE)
  return CODE_IMAGE
}
