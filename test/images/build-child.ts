/**
 * Child process for the concurrency and interruption tests: builds one image and reports
 * progress and the result as JSON lines on stdout.
 *   node --import tsx test/images/build-child.ts <cacheDir> <name>
 */
import { ImageStore } from '../../lib/images/index.js'

const [cacheDir, name] = process.argv.slice(2)
const store = new ImageStore({ cacheDir })
const image = await store.build(name, { onProgress: (progress) => console.log(JSON.stringify({ progress })) })
console.log(JSON.stringify({ result: { id: image.id, built: image.built } }))
