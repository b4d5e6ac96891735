/**
 * Frame codec for protocol v1 (see PROTOCOL.md): a 10-byte header
 * [u32 length][u32 stream][u8 type][u8 flags] followed by the payload.
 * The decoder treats its input as hostile: it never allocates past the cap and never throws;
 * a frame it cannot deliver whole (over the cap) comes out as a marker naming its stream, so
 * the one request it belongs to fails and the byte stream stays in step.
 */
import {
  FrameType,
  HEADER_BYTES,
  MAX_PAYLOAD,
  OUTPUT_HEADER_BYTES,
  WINDOW_PAYLOAD_BYTES,
  type FrameTypeId,
  MESSAGES,
} from './contract.gen.js'

// The layout, types, flags and cap are the contract's (protocol/v1.json).
export {
  FLAG_END,
  FrameType,
  HEADER_BYTES,
  MAX_PAYLOAD,
  OUTPUT_HEADER_BYTES,
  type FrameTypeId,
} from './contract.gen.js'

const KNOWN_TYPES = new Set<number>(Object.values(FrameType))

export function isKnownType(type: number): type is FrameTypeId {
  return KNOWN_TYPES.has(type)
}

export interface Frame {
  stream: number
  /** Any byte the peer sent: check it with isKnownType before trusting it. */
  type: FrameTypeId
  flags: number
  payload: Buffer
  /** Set when the frame announced more than MAX_PAYLOAD bytes: its payload was skipped unread. */
  oversized?: number
}

/** The 10-byte header of a frame whose payload has `length` bytes. */
export function encodeHeader(stream: number, type: FrameTypeId, flags: number, length: number): Buffer {
  if (length > MAX_PAYLOAD) throw new RangeError(`frame payload ${length} bytes exceeds ${MAX_PAYLOAD}`)
  const header = Buffer.allocUnsafe(HEADER_BYTES)
  header.writeUInt32BE(length, 0)
  header.writeUInt32BE(stream >>> 0, 4)
  header.writeUInt8(type, 8)
  header.writeUInt8(flags, 9)
  return header
}

export function encodeFrame(
  stream: number,
  type: FrameTypeId,
  flags: number,
  payload: Buffer = Buffer.alloc(0),
): Buffer {
  const header = encodeHeader(stream, type, flags, payload.length)
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
 * A frame that runs past its chunk is assembled in a buffer of its own size. A frame
 * that lies inside one chunk is returned as a view of it, or as a copy when the chunk
 * is transient (a read buffer that the next read overwrites). Either way every byte is
 * copied at most once. A header announcing more than MAX_PAYLOAD bytes yields a frame
 * with `oversized` set and no payload; the announced bytes are then skipped, never kept.
 */
export class FrameDecoder {
  readonly #transientChunks: boolean

  /** transientChunks: pushed chunks are reused after push() returns, so frames must not view them. */
  constructor(options: { transientChunks?: boolean } = {}) {
    this.#transientChunks = options.transientChunks === true
  }

  /** A header cut by a chunk boundary, gathered byte-wise. */
  #head = Buffer.alloc(HEADER_BYTES)
  #headFill = 0
  /** A frame (header included) being assembled across chunks. */
  #partial: Buffer | null = null
  #partialFill = 0
  /** Payload bytes of an oversized frame still to be skipped. */
  #skip = 0

  push(chunk: Buffer): Frame[] {
    const frames: Frame[] = []
    let off = 0
    for (;;) {
      if (this.#skip > 0) {
        const n = Math.min(this.#skip, chunk.length - off)
        this.#skip -= n
        off += n
        if (this.#skip > 0) break
        continue
      }
      if (this.#partial) {
        const n = Math.min(this.#partial.length - this.#partialFill, chunk.length - off)
        chunk.copy(this.#partial, this.#partialFill, off, off + n)
        this.#partialFill += n
        off += n
        if (this.#partialFill < this.#partial.length) break
        frames.push(toFrame(this.#partial))
        this.#partial = null
        continue
      }
      const left = chunk.length - off
      if (left === 0) break
      if (this.#headFill > 0 || left < HEADER_BYTES) {
        const n = Math.min(HEADER_BYTES - this.#headFill, left)
        chunk.copy(this.#head, this.#headFill, off, off + n)
        this.#headFill += n
        off += n
        if (this.#headFill < HEADER_BYTES) break
        this.#headFill = 0
        this.#startFrame(this.#head, 0, frames)
        continue
      }
      const length = chunk.readUInt32BE(off)
      const end = off + HEADER_BYTES + length
      if (length <= MAX_PAYLOAD && end <= chunk.length) {
        const whole = chunk.subarray(off, end)
        frames.push(toFrame(this.#transientChunks ? Buffer.from(whole) : whole))
        off = end
        continue
      }
      this.#startFrame(chunk, off, frames)
      off += HEADER_BYTES
    }
    return frames
  }

  /** Bytes of an incomplete frame still waiting for the rest (or still to be skipped). */
  get pending(): number {
    return this.#headFill + (this.#partial ? this.#partialFill : 0) + this.#skip
  }

  /** A header whose payload is not all here: assemble it, or skip it when over the cap. */
  #startFrame(header: Buffer, at: number, frames: Frame[]): void {
    const length = header.readUInt32BE(at)
    if (length > MAX_PAYLOAD) {
      frames.push({ ...toFrame(header.subarray(at, at + HEADER_BYTES)), oversized: length })
      this.#skip = length
      return
    }
    this.#partial = Buffer.allocUnsafe(HEADER_BYTES + length)
    header.copy(this.#partial, 0, at, at + HEADER_BYTES)
    this.#partialFill = HEADER_BYTES
  }
}

function toFrame(whole: Buffer): Frame {
  return {
    stream: whole.readUInt32BE(4),
    type: whole.readUInt8(8) as FrameTypeId,
    flags: whole.readUInt8(9),
    payload: whole.subarray(HEADER_BYTES),
  }
}

export interface OutputChunkFrame {
  fd: 1 | 2
  seq: number
  timestamp: number
  data: Buffer
}

export function decodeOutput(payload: Buffer): OutputChunkFrame {
  if (payload.length < OUTPUT_HEADER_BYTES)
    throw new FrameError(
      'S204',
      MESSAGES.badFrame({
        subject: `OUTPUT frame of ${payload.length} bytes`,
        problem: `is shorter than its ${OUTPUT_HEADER_BYTES}-byte header`,
      }),
    )
  const fd = payload.readUInt8(0)
  if (fd !== 1 && fd !== 2)
    throw new FrameError(
      'S204',
      MESSAGES.badFrame({ subject: 'OUTPUT frame', problem: `names fd ${fd}, expected 1 or 2` }),
    )
  const seq = Number(payload.readBigUInt64BE(1))
  const timestamp = Number(payload.readBigUInt64BE(9))
  if (!Number.isSafeInteger(seq) || !Number.isSafeInteger(timestamp))
    throw new FrameError(
      'S204',
      MESSAGES.badFrame({ subject: 'OUTPUT frame', problem: 'has its seq or timestamp out of range' }),
    )
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
  if (payload.length !== WINDOW_PAYLOAD_BYTES)
    throw new FrameError(
      'S204',
      MESSAGES.badFrame({
        subject: `WINDOW frame of ${payload.length} bytes`,
        problem: `is not ${WINDOW_PAYLOAD_BYTES} bytes`,
      }),
    )
  return payload.readUInt32BE(0)
}

export function encodeWindow(bytes: number): Buffer {
  const b = Buffer.allocUnsafe(WINDOW_PAYLOAD_BYTES)
  b.writeUInt32BE(bytes, 0)
  return b
}

export function decodeJson(payload: Buffer, what: string): Record<string, unknown> {
  let value: unknown
  try {
    value = JSON.parse(payload.toString('utf8'))
  } catch {
    throw new FrameError('S204', MESSAGES.badFrame({ subject: `${what} frame payload`, problem: 'is not valid JSON' }))
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new FrameError(
      'S204',
      MESSAGES.badFrame({ subject: `${what} frame payload`, problem: 'is not a JSON object' }),
    )
  return value as Record<string, unknown>
}
