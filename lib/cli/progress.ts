/** Image build progress for humans: a redrawn bar on a TTY, plain lines otherwise. */
import type { Writable } from 'node:stream'

export interface Progress {
  stage: string
  percent: number
  /** OCI pulls: the layer in flight and its bytes. */
  layer?: { index: number; count: number; bytes: number; totalBytes: number }
}

const mib = (bytes: number) => (bytes / 1048576).toFixed(1)

export class ProgressPrinter {
  #out: Writable & { isTTY?: boolean }
  #lastLine = ''

  constructor(out: Writable & { isTTY?: boolean }) {
    this.#out = out
  }

  update(p: Progress): void {
    const pct = Math.max(0, Math.min(100, Math.round(p.percent)))
    if (this.#out.isTTY) {
      const width = 30
      const filled = Math.round((pct / 100) * width)
      const layer = p.layer
        ? ` layer ${p.layer.index + 1}/${p.layer.count} ${mib(p.layer.bytes)}/${mib(p.layer.totalBytes)} MiB`
        : ''
      this.#out.write(
        `\r[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${String(pct).padStart(3)}% ${p.stage.padEnd(10)}${layer.padEnd(32)}`,
      )
      return
    }
    // Logs get a line per stage and per 10% step, not one per percent.
    const line = `${p.stage} ${pct - (pct % 10)}%`
    if (line !== this.#lastLine) this.#out.write(`${p.stage} ${pct}%\n`)
    this.#lastLine = line
  }

  done(): void {
    if (this.#out.isTTY) this.#out.write('\n')
  }
}
