/**
 * Builds images ahead of use (the project's setup runs it):
 *   tsx scripts/prepare-images.ts base [python node python-node]
 *   tsx scripts/prepare-images.ts --all [--force] [--cache-dir DIR]
 * Prints one line per stage (and every 10 %) and a summary per image; exits 1 on failure.
 */
import { ImageStore, PRESETS, type ProgressEvent } from '../lib/images/index.js'
import { isSandboxError } from '../lib/errors.js'

function usage(): never {
  console.error(
    `usage: tsx scripts/prepare-images.ts [--force] [--cache-dir DIR] (--all | NAME...)\npresets: ${Object.keys(PRESETS).join(', ')}`,
  )
  process.exit(2)
}

function parseArgs(argv: string[]): { names: string[]; force: boolean; cacheDir?: string } {
  const names: string[] = []
  let force = false
  let cacheDir: string | undefined
  for (let i = 0; i < argv.length; i += 1) {
    const arg = argv[i]
    if (arg === '--force') force = true
    else if (arg === '--all') names.push(...Object.keys(PRESETS))
    else if (arg === '--cache-dir') cacheDir = argv[++i] ?? usage()
    else if (arg === '--help' || arg === '-h' || arg.startsWith('-')) usage()
    else names.push(arg)
  }
  if (names.length === 0) usage()
  return { names: [...new Set(names)], force, cacheDir }
}

function megabytes(bytes: number): string {
  return `${(bytes / 1e6).toFixed(1)} MB`
}

async function main(): Promise<void> {
  const { names, force, cacheDir } = parseArgs(process.argv.slice(2))
  const store = new ImageStore({ cacheDir })
  console.log(`image cache: ${store.cacheDir} (suite ${store.suite}, ${store.buildMode} mode)`)
  for (const name of names) {
    const started = Date.now()
    let last: ProgressEvent | null = null
    const onProgress = (event: ProgressEvent): void => {
      if (last !== null && last.stage === event.stage && event.percent < last.percent + 10 && event.percent !== 100)
        return
      last = event
      console.log(`[${name}] ${event.stage} ${event.percent}%`)
    }
    const image = await store.build(name, { onProgress, force })
    const seconds = ((Date.now() - started) / 1000).toFixed(2)
    const how = image.built ? `built in ${seconds} s` : `already built (${seconds} s)`
    console.log(
      `[${name}] ready ${image.id.slice(0, 12)} ${megabytes(image.manifest.sizeBytes)}, ${image.manifest.packages.length} packages, ${how}`,
    )
    console.log(`[${name}] rootfs ${image.rootfs}`)
  }
}

main().catch((err: unknown) => {
  if (isSandboxError(err)) console.error(`prepare-images: ${err.message}`)
  else console.error('prepare-images:', err)
  process.exit(1)
})
