/**
 * First-use progress of `krunbox run` and `krunbox create`: the image is built the first time it
 * is used (seconds for python or node), which would otherwise look like a hang. Shown on stderr,
 * only when stderr is a terminal, and never with --json (stdout stays machine-readable).
 */
import type { ProgressEvent } from '../images/index.js'
import { ProgressPrinter } from './progress.js'

export interface FirstUseProgress {
  /** Pass to create(); undefined when nothing is to be shown. */
  onProgress?: (event: ProgressEvent) => void
  /** Ends the bar's line, if one was drawn. */
  done(): void
}

export function firstUseProgress(
  image: string,
  options: { json?: boolean; stderr?: NodeJS.WriteStream } = {},
): FirstUseProgress {
  const stderr = options.stderr ?? process.stderr
  if (options.json || !stderr.isTTY) return { done() {} }
  let printer: ProgressPrinter | null = null
  return {
    onProgress(event) {
      if (printer === null) {
        stderr.write(`krunbox: building image ${image} (first use; cached afterwards)\n`)
        printer = new ProgressPrinter(stderr)
      }
      printer.update(event)
    },
    done() {
      printer?.done()
      printer = null
    },
  }
}
