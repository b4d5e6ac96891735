/**
 * Frame codec for protocol v1 (see PROTOCOL.md): a 10-byte header
 * [u32 length][u32 stream][u8 type][u8 flags] followed by the payload.
 * The decoder treats its input as hostile: any violation is reported, never thrown past it.
 */
export const HEADER_BYTES = 10
export const MAX_PAYLOAD = 4 * 1024 * 1024

export const FrameType = {
  HELLO: 0x01,
  REQUEST: 0x02,
  RESPONSE: 0x03,
  ERROR: 0x04,
  EVENT: 0x05,
  DATA: 0x06,
  OUTPUT: 0x07,
  WINDOW: 0x08,
  CANCEL: 0x09,
  PING: 0x0a,
  PONG: 0x0b,
} as const
export type FrameTypeId = (typeof FrameType)[keyof typeof FrameType]

export const FLAG_END = 0x01

const KNOWN_TYPES = new Set<number>(Object.values(FrameType))

export interface Frame {
  stream: number
  type: FrameTypeId
  flags: number
  payload: Buffer
}

export function encodeFrame(stream: number, type: FrameTypeId, flags: number, payload: Buffer = Buffer.alloc(0)): Buffer {
  if (payload.length > MAX_PAYLOAD) throw new RangeError(`frame payload ${payload.length} bytes exceeds ${MAX_PAYLOAD}`)
  const header = Buffer.allocUnsafe(HEADER_BYTES)
  header.writeUInt32BE(payload.length, 0)
  header.writeUInt32BE(stream >>> 0, 4)
  header.writeUInt8(type, 8)
  header.writeUInt8(flags, 9)
  return payload.length === 0 ? header : Buffer.concat([header, payload])
}

export class FrameError extends Error {
  constructor(
    readonly code: 'S203' | 'S204',
    message: string,
  ) {
    super(message)
  }
}

/**
 * Incremental decoder: push() bytes as they arrive, get back whole frames.
 * Keeps a list of chunks instead of concatenating on every push, so a 4 MiB frame
 * that arrives in 64 KiB pieces costs one copy.
 */
export class FrameDecoder {
  #chunks: Buffer[] = []
  #buffered = 0

  push(chunk: Buffer): Frame[] {
    this.#chunks.push(chunk)
    this.#buffered += chunk.length
    const frames: Frame[] = []
    while (this.#buffered >= HEADER_BYTES) {
      const header = this.#peek(HEADER_BYTES)
      const length = header.readUInt32BE(0)
      if (length > MAX_PAYLOAD) throw new FrameError('S203', `frame of ${length} bytes exceeds the ${MAX_PAYLOAD}-byte cap`)
      const type = header.readUInt8(8)
      if (!KNOWN_TYPES.has(type)) throw new FrameError('S204', `unknown frame type 0x${type.toString(16)}`)
      if (this.#buffered < HEADER_BYTES + length) break
      const whole = this.#take(HEADER_BYTES + length)
      frames.push({
        stream: whole.readUInt32BE(4),
        type: type as FrameTypeId,
        flags: whole.readUInt8(9),
        payload: whole.subarray(HEADER_BYTES),
      })
    }
    return frames
  }

  /** Bytes of an incomplete frame still waiting for the rest. */
  get pending(): number {
    return this.#buffered
  }

  #peek(n: number): Buffer {
    if (this.#chunks[0].length >= n) return this.#chunks[0].subarray(0, n)
    const merged = Buffer.concat(this.#chunks)
    this.#chunks = [merged]
    return merged.subarray(0, n)
  }

  #take(n: number): Buffer {
    let out: Buffer
    if (this.#chunks[0].length >= n) {
      out = this.#chunks[0].subarray(0, n)
    } else {
      const merged = Buffer.concat(this.#chunks)
      this.#chunks = [merged]
      out = merged.subarray(0, n)
    }
    const rest = this.#chunks[0].subarray(n)
    if (rest.length === 0) this.#chunks.shift()
    else this.#chunks[0] = rest
    this.#buffered -= n
    return out
  }
}

export interface OutputChunkFrame {
  fd: 1 | 2
  seq: number
  timestamp: number
  data: Buffer
}

export const OUTPUT_HEADER_BYTES = 17

export function decodeOutput(payload: Buffer): OutputChunkFrame {
  if (payload.length < OUTPUT_HEADER_BYTES) throw new FrameError('S204', `OUTPUT frame of ${payload.length} bytes is shorter than its ${OUTPUT_HEADER_BYTES}-byte header`)
  const fd = payload.readUInt8(0)
  if (fd !== 1 && fd !== 2) throw new FrameError('S204', `OUTPUT frame names fd ${fd}, expected 1 or 2`)
  const seq = Number(payload.readBigUInt64BE(1))
  const timestamp = Number(payload.readBigUInt64BE(9))
  if (!Number.isSafeInteger(seq) || !Number.isSafeInteger(timestamp)) throw new FrameError('S204', 'OUTPUT frame seq or timestamp out of range')
  return { fd, seq, timestamp, data: payload.subarray(OUTPUT_HEADER_BYTES) }
}

export function encodeOutput(chunk: OutputChunkFrame): Buffer {
  const header = Buffer.allocUnsafe(OUTPUT_HEADER_BYTES)
  header.writeUInt8(chunk.fd, 0)
  header.writeBigUInt64BE(BigInt(chunk.seq), 1)
  header.writeBigUInt64BE(BigInt(chunk.timestamp), 9)
  return Buffer.concat([header, chunk.data])
}

export function decodeWindow(payload: Buffer): number {
  if (payload.length !== 4) throw new FrameError('S204', `WINDOW frame of ${payload.length} bytes, expected 4`)
  return payload.readUInt32BE(0)
}

export function encodeWindow(bytes: number): Buffer {
  const b = Buffer.allocUnsafe(4)
  b.writeUInt32BE(bytes, 0)
  return b
}

export function decodeJson(payload: Buffer, what: string): Record<string, unknown> {
  let value: unknown
  try {
    value = JSON.parse(payload.toString('utf8'))
  } catch {
    throw new FrameError('S204', `${what} frame payload is not valid JSON`)
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new FrameError('S204', `${what} frame payload is not a JSON object`)
  return value as Record<string, unknown>
}
