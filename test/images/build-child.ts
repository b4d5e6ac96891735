/**
 * Child process for the concurrency and interruption tests: builds one image and reports
 * progress and the result as JSON lines on stdout.
 *   node --import tsx test/images/build-child.ts <cacheDir> <name> [<recipe as JSON>]
 * With a recipe, registers it under name (which builds it).
 */
import { ImageStore } from '../../lib/images/index.js'

const [cacheDir, name, recipe] = process.argv.slice(2)
const store = new ImageStore({ cacheDir })
const onProgress = (progress: unknown) => console.log(JSON.stringify({ progress }))
const image =
  recipe === undefined
    ? await store.build(name, { onProgress })
    : await store.register(name, JSON.parse(recipe), { onProgress })
console.log(JSON.stringify({ result: { id: image.id, built: image.built } }))
