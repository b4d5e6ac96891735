/** A Jupyter MIME bundle as a CodeResult: the common formats by name, images as bytes, the rest in `extra`. */
import type { ExecutionError, CodeResult } from './types.js'

/** MIME type → the CodeResult field it fills, and whether its value is base64 bytes. */
const FORMATS: ReadonlyArray<{ mime: string; field: keyof CodeResult; kind: 'text' | 'bytes' | 'json' }> = [
  { mime: 'text/plain', field: 'text', kind: 'text' },
  { mime: 'text/html', field: 'html', kind: 'text' },
  { mime: 'text/markdown', field: 'markdown', kind: 'text' },
  { mime: 'image/svg+xml', field: 'svg', kind: 'text' },
  { mime: 'image/png', field: 'png', kind: 'bytes' },
  { mime: 'image/jpeg', field: 'jpeg', kind: 'bytes' },
  { mime: 'text/latex', field: 'latex', kind: 'text' },
  { mime: 'application/json', field: 'json', kind: 'json' },
  { mime: 'application/javascript', field: 'javascript', kind: 'text' },
]

export function resultFromBundle(data: Record<string, unknown>, isMainResult: boolean): CodeResult {
  const result: CodeResult = { isMainResult, formats: [], extra: {} }
  const fields = result as unknown as Record<string, unknown>
  const known = new Set<string>()
  for (const { mime, field, kind } of FORMATS) {
    if (!Object.hasOwn(data, mime)) continue
    const value = data[mime]
    // A format of the wrong type is kept as sent, under extra.
    if (kind !== 'json' && typeof value !== 'string') continue
    fields[field] = kind === 'bytes' ? Buffer.from(value as string, 'base64') : value
    result.formats.push(field)
    known.add(mime)
  }
  for (const [mime, value] of Object.entries(data)) {
    if (known.has(mime)) continue
    // Defined, not assigned: a key "__proto__" from the kernel must stay a plain key.
    Object.defineProperty(result.extra, mime, { value, enumerable: true, writable: true, configurable: true })
    result.formats.push(mime)
  }
  return result
}

export function executionError(name: string, value: string, traceback: string[]): ExecutionError {
  return { name, value, traceback: traceback.join('\n') }
}
