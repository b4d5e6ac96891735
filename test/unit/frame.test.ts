import { describe, expect, it } from 'vitest'
import {
  decodeOutput,
  encodeFrame,
  encodeOutput,
  FrameDecoder,
  FrameType,
  FLAG_END,
  isKnownType,
  MAX_PAYLOAD,
} from '../../lib/protocol/frame.js'

describe('frame codec', () => {
  it('round-trips frames split at every byte boundary', () => {
    const a = encodeFrame(1, FrameType.REQUEST, 0, Buffer.from('{"op":"x"}'))
    const b = encodeFrame(3, FrameType.DATA, FLAG_END, Buffer.from([0, 1, 2, 255]))
    const wire = Buffer.concat([a, b])
    for (let cut = 0; cut <= wire.length; cut++) {
      const d = new FrameDecoder()
      const frames = [...d.push(wire.subarray(0, cut)), ...d.push(wire.subarray(cut))]
      expect(frames.map((f) => [f.stream, f.type, f.flags, f.payload.toString('hex')])).toEqual([
        [1, FrameType.REQUEST, 0, Buffer.from('{"op":"x"}').toString('hex')],
        [3, FrameType.DATA, FLAG_END, '000102ff'],
      ])
      expect(d.pending).toBe(0)
    }
  })

  it('with transient chunks, returns frames that survive the reuse of the read buffer', () => {
    const wire = Buffer.concat([
      encodeFrame(1, FrameType.DATA, 0, Buffer.from('first')),
      encodeFrame(1, FrameType.DATA, 0, Buffer.from('second, cut in two')),
    ])
    const readBuffer = Buffer.alloc(wire.length)
    const d = new FrameDecoder({ transientChunks: true })
    const frames = []
    for (const [from, to] of [
      [0, 20],
      [20, wire.length],
    ]) {
      wire.copy(readBuffer, 0, from, to)
      frames.push(...d.push(readBuffer.subarray(0, to - from)))
      readBuffer.fill(0x58) // the next read overwrites the buffer
    }
    expect(frames.map((f) => f.payload.toString())).toEqual(['first', 'second, cut in two'])
  })

  it('keeps a truncated frame pending instead of inventing one', () => {
    const d = new FrameDecoder()
    const f = encodeFrame(1, FrameType.EVENT, 0, Buffer.from('{"a":1}'))
    expect(d.push(f.subarray(0, f.length - 1))).toEqual([])
    expect(d.pending).toBe(f.length - 1)
  })

  it('skips an oversized frame unread and marks it, without buffering its payload, then decodes the next frame', () => {
    const header = Buffer.alloc(10)
    header.writeUInt32BE(MAX_PAYLOAD + 1, 0)
    header.writeUInt32BE(3, 4)
    header.writeUInt8(FrameType.DATA, 8)
    const d = new FrameDecoder()
    const first = d.push(header)
    expect(first).toHaveLength(1)
    expect(first[0]).toMatchObject({ stream: 3, oversized: MAX_PAYLOAD + 1 })
    expect(first[0].payload.length).toBe(0)
    // The announced payload is consumed as it arrives and never kept; the next frame decodes.
    expect(d.push(Buffer.alloc(MAX_PAYLOAD + 1, 1))).toEqual([])
    const next = d.push(encodeFrame(4, FrameType.DATA, 0, Buffer.from('ok')))
    expect(next.map((f) => [f.stream, f.payload.toString()])).toEqual([[4, 'ok']])
  })

  it('passes an unknown frame type through for the connection to refuse (isKnownType)', () => {
    const f = encodeFrame(1, FrameType.DATA, 0, Buffer.from('x'))
    f.writeUInt8(0x7f, 8)
    const [frame] = new FrameDecoder().push(f)
    expect(frame.type).toBe(0x7f)
    expect(isKnownType(frame.type)).toBe(false)
    expect(isKnownType(FrameType.DATA)).toBe(true)
  })

  it('accepts exactly MAX_PAYLOAD and refuses to encode more', () => {
    const big = Buffer.alloc(MAX_PAYLOAD, 7)
    const frames = new FrameDecoder().push(encodeFrame(5, FrameType.DATA, 0, big))
    expect(frames[0].payload.length).toBe(MAX_PAYLOAD)
    expect(() => encodeFrame(5, FrameType.DATA, 0, Buffer.alloc(MAX_PAYLOAD + 1))).toThrow(RangeError)
  })

  it('decodes OUTPUT chunks and rejects short or bad-fd ones', () => {
    const payload = encodeOutput({ fd: 2, seq: 42, timestamp: 1700000000000, data: Buffer.from('err') })
    expect(decodeOutput(payload)).toEqual({ fd: 2, seq: 42, timestamp: 1700000000000, data: Buffer.from('err') })
    expect(() => decodeOutput(payload.subarray(0, 16))).toThrow(/shorter/)
    const bad = Buffer.from(payload)
    bad.writeUInt8(3, 0)
    expect(() => decodeOutput(bad)).toThrow(/fd 3/)
  })
})
