/**
 * The bridge's stdout, read as hostile input: it is split into lines without ever holding more
 * of one line than its caller allows (a longer line is skipped to its newline and only counted),
 * and each line is parsed into one of the bridge's messages, field by field, or refused. A cell
 * can write to this stream (it runs as the bridge's uid), so nothing here trusts its shape.
 */

/** Splits a byte stream into lines; a line over limit() bytes is dropped, never buffered past the limit. */
export class BoundedLines {
  #parts: Buffer[] = []
  #size = 0
  /** Bytes of the line being skipped, or -1 while the current line is kept. */
  #skipped = -1

  constructor(
    private readonly limit: () => number,
    private readonly onLine: (line: Buffer) => void,
    private readonly onOversize: (bytes: number) => void,
  ) {}

  push(chunk: Buffer): void {
    let start = 0
    while (start < chunk.length) {
      const nl = chunk.indexOf(0x0a, start)
      const end = nl < 0 ? chunk.length : nl
      const piece = chunk.subarray(start, end)
      if (this.#skipped >= 0) this.#skipped += piece.length
      else if (this.#size + piece.length > this.limit()) {
        this.#skipped = this.#size + piece.length
        this.#parts = []
        this.#size = 0
      } else if (piece.length > 0) {
        // A partial line is copied: a reference would keep the whole chunk alive.
        this.#parts.push(nl < 0 ? Buffer.from(piece) : piece)
        this.#size += piece.length
      }
      if (nl < 0) return
      start = nl + 1
      if (this.#skipped >= 0) {
        const bytes = this.#skipped + 1
        this.#skipped = -1
        this.onOversize(bytes)
        continue
      }
      const line = this.#parts.length === 1 ? this.#parts[0] : Buffer.concat(this.#parts, this.#size)
      this.#parts = []
      this.#size = 0
      this.onLine(line)
    }
  }
}

export type BridgeMessage =
  | { t: 'ready'; pid: number | null; language: string; implementation: string; version: string }
  | { t: 'fatal'; reason: string }
  | { t: 'stream'; id: string; name: 'stdout' | 'stderr'; text: string }
  | { t: 'display'; id: string; data: Record<string, unknown>; main: boolean; count: number | null }
  | { t: 'error'; id: string; name: string; value: string; traceback: string[] }
  | { t: 'capped'; id: string; droppedBytes: number; droppedMessages: number }
  | { t: 'done'; id: string; status: string; count: number | null }
  | { t: 'died'; id: string | null; exitCode: number | null }

/** The bridge's short strings (reasons, versions) are cut to this many characters. */
const SHORT_TEXT = 512

/** One line as a bridge message, or null when it is not one (bad JSON, an unknown type, a field of the wrong type). */
export function parseBridgeLine(line: Buffer): BridgeMessage | null {
  let value: unknown
  try {
    value = JSON.parse(line.toString('utf8'))
  } catch {
    return null
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return null
  const o = value as Record<string, unknown>
  const str = (k: string) => (typeof o[k] === 'string' ? (o[k] as string) : null)
  const count = (k: string) => (Number.isSafeInteger(o[k]) && (o[k] as number) >= 0 ? (o[k] as number) : null)
  const id = str('id')
  switch (o.t) {
    case 'ready':
      return {
        t: 'ready',
        pid: count('pid'),
        language: (str('language') ?? '').slice(0, SHORT_TEXT),
        implementation: (str('implementation') ?? '').slice(0, SHORT_TEXT),
        version: (str('version') ?? '').slice(0, SHORT_TEXT),
      }
    case 'fatal':
      return { t: 'fatal', reason: (str('reason') ?? 'no reason given').slice(0, SHORT_TEXT) }
    case 'stream': {
      const text = str('text')
      if (id === null || text === null || (o.name !== 'stdout' && o.name !== 'stderr')) return null
      return { t: 'stream', id, name: o.name, text }
    }
    case 'display': {
      const data = o.data
      if (id === null || data === null || typeof data !== 'object' || Array.isArray(data)) return null
      return { t: 'display', id, data: data as Record<string, unknown>, main: o.main === true, count: count('count') }
    }
    case 'error': {
      const tb = Array.isArray(o.traceback) ? o.traceback.filter((l): l is string => typeof l === 'string') : []
      if (id === null) return null
      return { t: 'error', id, name: str('name') ?? '', value: str('value') ?? '', traceback: tb }
    }
    case 'capped':
      if (id === null) return null
      return {
        t: 'capped',
        id,
        droppedBytes: count('droppedBytes') ?? 0,
        droppedMessages: count('droppedMessages') ?? 0,
      }
    case 'done':
      if (id === null) return null
      return { t: 'done', id, status: (str('status') ?? '').slice(0, SHORT_TEXT), count: count('count') }
    case 'died':
      return { t: 'died', id, exitCode: Number.isSafeInteger(o.exitCode) ? (o.exitCode as number) : null }
    default:
      return null
  }
}
