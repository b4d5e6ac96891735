/**
 * The refusals a detached sandbox's keeper writes to network-keeper.log, bounded. A sandbox
 * that loops over refused lookups made that file grow 1.7 MB/s. Here the first refusals of
 * each window are logged one by one, the rest counted into one summary line per window, and the
 * file is truncated (with a line saying so) before it would pass its cap.
 */
import fs from 'node:fs'

export interface DenialLogLimits {
  /** Refusals logged one by one per window; the rest are summarised. */
  perWindow?: number
  windowMs?: number
  /** The log's size never passes this. */
  maxBytes?: number
}

export const DENIAL_LOG_MAX_BYTES = 1024 * 1024

export class DenialLog {
  readonly #fd: number
  readonly #perWindow: number
  readonly #maxBytes: number
  #logged = 0
  #skipped = 0
  #skippedDestinations = new Set<string>()
  readonly #timer: NodeJS.Timeout

  /** `fd`: the log, opened for appending (the keeper's stderr). */
  constructor(fd: number, limits: DenialLogLimits = {}) {
    this.#fd = fd
    this.#perWindow = limits.perWindow ?? 20
    this.#maxBytes = limits.maxBytes ?? DENIAL_LOG_MAX_BYTES
    this.#timer = setInterval(() => this.endWindow(), limits.windowMs ?? 10_000).unref()
  }

  record<T extends { destination: string }>(denial: T): void {
    if (this.#logged < this.#perWindow) {
      this.#logged++
      this.#write(`denied ${JSON.stringify(denial)}\n`)
      return
    }
    this.#skipped++
    // A bounded set: the count of destinations only needs to say "many".
    if (this.#skippedDestinations.size < 10_000) this.#skippedDestinations.add(denial.destination)
  }

  /** Writes the window's summary, if anything was left out, and starts a new window. */
  endWindow(): void {
    if (this.#skipped > 0) {
      const destinations = this.#skippedDestinations.size
      this.#write(
        `denied ${this.#skipped} more (${destinations}${destinations === 10_000 ? '+' : ''} destinations) since the last summary, not logged one by one\n`,
      )
    }
    this.#logged = 0
    this.#skipped = 0
    this.#skippedDestinations.clear()
  }

  close(): void {
    clearInterval(this.#timer)
    this.endWindow()
  }

  #write(line: string): void {
    try {
      const size = fs.fstatSync(this.#fd).size
      if (size + Buffer.byteLength(line) > this.#maxBytes) {
        fs.ftruncateSync(this.#fd, 0)
        fs.writeSync(this.#fd, `network-keeper.log truncated at ${size} bytes (its cap is ${this.#maxBytes})\n`)
      }
      fs.writeSync(this.#fd, line)
    } catch {
      // A log that cannot be written must not end the sandbox's network.
    }
  }
}
