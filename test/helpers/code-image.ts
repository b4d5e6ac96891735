/**
 * The image the code interpreter's tests run on, built once on first use and shared by every
 * test file through the image cache (its build lock makes the others wait for it).
 */
import type { Runtime } from '../../lib/runtime.js'

export const CODE_IMAGE = 'code-test'

/**
 * Until images run maintainer scripts, BLAS and LAPACK have no alternatives links (libblas.so.3):
 * numpy finds them on this path.
 */
const multiarch = process.arch === 'arm64' ? 'aarch64-linux-gnu' : 'x86_64-linux-gnu'
export const CODE_IMAGE_ENV = { LD_LIBRARY_PATH: `/usr/lib/${multiarch}/blas:/usr/lib/${multiarch}/lapack` }

/** Registers the image (a no-op once cached) and returns its name. */
export async function codeImage(rt: Runtime): Promise<string> {
  await rt.images.register(CODE_IMAGE, {
    base: 'python-node',
    packages: ['python3-ipykernel', 'python3-jupyter-client', 'python3-matplotlib', 'python3-pandas'],
  })
  return CODE_IMAGE
}
