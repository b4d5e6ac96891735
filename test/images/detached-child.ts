/**
 * Another process on the same cache for the prune tests: creates a detached sandbox of an
 * image, prints how to attach to it, and exits while the sandbox lives on.
 *   node --import tsx test/images/detached-child.ts <cacheDir> <stateDir> <image>
 */
import { Runtime } from '../../lib/runtime.js'

const [cacheDir, stateDir, image] = process.argv.slice(2)
const rt = new Runtime({ cacheDir, stateDir })
const sb = await rt.create({ image, detached: true })
console.log(JSON.stringify({ id: sb.id, accessToken: sb.accessToken, imageVersion: sb.imageVersion }))
process.exit(0)
