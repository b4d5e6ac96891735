/**
 * Fuzz of the host's side of the wire: frames built from the contract (every op's RESPONSE and
 * EVENTs, ERROR, OUTPUT, DATA, WINDOW, HELLO), then mutated at the JSON, byte and header level,
 * concatenated and cut at random points, go through the frame decoder and the client's checks
 * (readAgentFrame, validateHello, errorFromAgent). Whatever comes in, nothing but a coded
 * rejection comes out: no other exception, no hang. Seeded, so a failure replays.
 */
import { describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import { readAgentFrame } from '../../lib/protocol/agent-frame.js'
import { errorFromAgent, validateHello } from '../../lib/protocol/client.js'
import {
  ERROR_BODY_FIELDS,
  HELLO_RESPONSE_FIELDS,
  OPS,
  SHAPES,
  type FieldSpec,
  type FieldTable,
  type OpName,
} from '../../lib/protocol/contract.gen.js'
import {
  decodeJson,
  encodeFrame,
  encodeOutput,
  encodeWindow,
  FLAG_END,
  type Frame,
  FrameDecoder,
  FrameError,
  FrameType,
  type FrameTypeId,
  MAX_PAYLOAD,
} from '../../lib/protocol/frame.js'
import { checksFor } from '../../lib/protocol/validate.js'

const CASES = 100_000
const SEED = 0x6b72756e

/** mulberry32: small, seeded, good enough to pick mutations. */
function prng(seed: number) {
  let a = seed >>> 0
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  return {
    next,
    int: (n: number) => Math.floor(next() * n),
    pick: <T>(xs: readonly T[]): T => xs[Math.floor(next() * xs.length)],
  }
}
const rnd = prng(SEED)

/** A value of the type a field states (the valid frames every mutation starts from). */
function sample(type: string, spec: Partial<FieldSpec>): unknown {
  switch (type) {
    case 'string':
      return spec.enum ? rnd.pick(spec.enum) : rnd.pick(['', 'x', 'stdout', '/a/b', 'ü'])
    case 'int':
      return rnd.pick([0, 1, 7, 65535, 2 ** 40])
    case 'number':
      return rnd.pick([0, 1.5, 1e6])
    case 'bool':
      return rnd.next() < 0.5
    case 'object':
      return {}
    case 'array':
      return Array.from({ length: rnd.int(3) }, () => sample(spec.items ?? 'string', {}))
    case 'map':
      return { k: sample(spec.values ?? 'string', {}) }
    default:
      return body(SHAPES[type])
  }
}

function body(table: FieldTable): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const [name, spec] of Object.entries(table)) {
    if (spec.optional && rnd.next() < 0.5) continue
    out[name] = spec.nullable && rnd.next() < 0.3 ? null : sample(rnd.pick(spec.type), spec)
  }
  return out
}

const JUNK: unknown[] = [null, true, 0, -1, 1.5, 2 ** 64, '', 'x', [], [1, 'a'], {}, { type: 7 }, '\u0000', 'S204']

/** One JSON-level mutation: a field dropped, retyped or nested deeper, or the whole body replaced. */
function mutateJson(value: Record<string, unknown>): unknown {
  const keys = Object.keys(value)
  const copy: Record<string, unknown> = { ...value }
  switch (rnd.int(5)) {
    case 0:
      if (keys.length) delete copy[rnd.pick(keys)]
      return copy
    case 1:
      if (keys.length) copy[rnd.pick(keys)] = rnd.pick(JUNK)
      return copy
    case 2: {
      // Deep: a nested snapshot or list element goes wrong.
      const k = keys.find((x) => typeof copy[x] === 'object' && copy[x] !== null)
      if (k)
        copy[k] = Array.isArray(copy[k])
          ? [...(copy[k] as unknown[]), rnd.pick(JUNK)]
          : mutateJson(copy[k] as Record<string, unknown>)
      return copy
    }
    case 3:
      return rnd.pick(JUNK)
    default:
      copy[`extra${rnd.int(3)}`] = rnd.pick(JUNK)
      return copy
  }
}

const OP_NAMES = Object.keys(OPS) as OpName[]

/** A frame the contract allows on a stream of `op`, or (mostly) one mutated from it. */
function frameFor(op: string, stream: number): Buffer {
  const spec = OPS[op as keyof typeof OPS]
  const events = Object.entries(spec.events)
  let type: FrameTypeId = FrameType.RESPONSE
  let flags = FLAG_END
  let payload: Buffer
  const kind = rnd.int(7)
  if (kind <= 1) payload = json(maybe(body(spec.response)))
  else if (kind === 2) {
    type = FrameType.ERROR
    payload = json(maybe(body(ERROR_BODY_FIELDS)))
  } else if (kind === 3 && events.length) {
    type = FrameType.EVENT
    flags = 0
    const [name, table] = rnd.pick(events)
    payload = json(maybe({ type: name, ...body(table) }))
  } else if (kind === 4) {
    type = FrameType.OUTPUT
    flags = 0
    payload = encodeOutput({
      fd: rnd.pick([1, 2] as const),
      seq: rnd.int(1000),
      timestamp: Date.now(),
      data: Buffer.from('out'),
    })
  } else if (kind === 5) {
    type = FrameType.WINDOW
    flags = 0
    payload = encodeWindow(rnd.int(2 ** 20))
  } else {
    type = FrameType.DATA
    flags = 0
    payload = Buffer.from('data')
  }
  return encodeFrame(stream, type, flags, payload)
}

function json(v: unknown): Buffer {
  return Buffer.from(JSON.stringify(v) ?? 'null')
}

/** Half the JSON bodies are mutated before encoding. */
function maybe(v: Record<string, unknown>): unknown {
  return rnd.next() < 0.5 ? mutateJson(v) : v
}

/** Byte-level damage: flipped bytes, a cut, inserted junk, or a header that lies. */
function mutateBytes(frame: Buffer): Buffer {
  const b = Buffer.from(frame)
  switch (rnd.int(6)) {
    case 0:
      for (let i = 0; i < 1 + rnd.int(4); i++) b[rnd.int(b.length)] ^= 1 << rnd.int(8)
      return b
    case 1:
      b.writeUInt8(rnd.int(256), 8) // any type byte
      return b
    case 2:
      b.writeUInt8(rnd.int(256), 9) // any flags
      return b
    case 3:
      // A length over the cap (its bytes are then skipped) or one that runs short.
      b.writeUInt32BE(
        rnd.next() < 0.3 ? MAX_PAYLOAD + 1 + rnd.int(1000) : Math.max(0, b.length - 10 - 1 - rnd.int(4)),
        0,
      )
      return b
    case 4:
      return b.subarray(0, rnd.int(b.length))
    default: {
      const at = 10 + rnd.int(Math.max(1, b.length - 10))
      return Buffer.concat([
        b.subarray(0, at),
        Buffer.from(Array.from({ length: 1 + rnd.int(8) }, () => rnd.int(256))),
        b.subarray(at),
      ])
    }
  }
}

/** Pushes bytes in random cuts; returns the frames the decoder produced. */
function decodeInCuts(decoder: FrameDecoder, bytes: Buffer): Frame[] {
  const frames: Frame[] = []
  for (let off = 0; off < bytes.length;) {
    const n = 1 + rnd.int(Math.min(bytes.length - off, 2048))
    frames.push(...decoder.push(bytes.subarray(off, off + n)))
    off += n
  }
  return frames
}

describe('host decoder fuzz', () => {
  it(`rejects ${CASES} random and mutated agent frames only with coded errors, and never hangs`, () => {
    const outcomes = { accepted: 0, rejected: 0, framesOut: 0 }
    const unexpected: unknown[] = []
    const codes = new Set<string>()
    // Building and encoding JSON bodies costs more than checking them: a pool of frames per op
    // (half of them JSON-mutated), each reused with fresh byte-level damage.
    const pool = new Map(
      OP_NAMES.map((op) => [op, Array.from({ length: 200 }, () => frameFor(op, 1 + 2 * rnd.int(4)))]),
    )
    let built = 0
    // A case is a frame that came out of the decoder and went through the checks.
    while (outcomes.framesOut < CASES) {
      // A batch: a fresh decoder (a lying length may swallow the rest of a batch, as on a real socket).
      const decoder = new FrameDecoder({ transientChunks: rnd.next() < 0.5 })
      const op = rnd.pick(OP_NAMES)
      const parts: Buffer[] = []
      for (let i = 0; i < 8; i++, built++) {
        const frame = rnd.pick(pool.get(rnd.next() < 0.9 ? op : rnd.pick(OP_NAMES))!)
        parts.push(
          rnd.next() < 0.05
            ? Buffer.from(Array.from({ length: rnd.int(64) }, () => rnd.int(256)))
            : rnd.next() < 0.5
              ? mutateBytes(frame)
              : frame,
        )
      }
      for (const frame of decodeInCuts(decoder, Buffer.concat(parts))) {
        outcomes.framesOut++
        try {
          const got = readAgentFrame(frame, checksFor(op))
          if (got.kind === 'error') expect(errorFromAgent(got.body)).toBeInstanceOf(SandboxError)
          outcomes.accepted++
        } catch (e) {
          if (e instanceof FrameError && (e.code === 'S203' || e.code === 'S204')) {
            codes.add(e.code)
            outcomes.rejected++
          } else unexpected.push(e)
        }
      }
      // The handshake answer, mutated the same ways.
      try {
        const hello = rnd.next() < 0.5 ? mutateJson(body(HELLO_RESPONSE_FIELDS)) : body(HELLO_RESPONSE_FIELDS)
        validateHello(decodeJson(json(hello), 'HELLO'))
      } catch (e) {
        if (
          !(e instanceof FrameError || e instanceof SandboxError) ||
          !['S201', 'S204'].includes((e as { code: string }).code)
        )
          unexpected.push(e)
      }
    }
    expect(unexpected).toEqual([])
    expect(built).toBeGreaterThanOrEqual(CASES)
    // The mix really exercised both sides and both codes.
    expect(outcomes.accepted).toBeGreaterThan(CASES / 10)
    expect(outcomes.rejected).toBeGreaterThan(CASES / 10)
    expect([...codes].sort()).toEqual(['S203', 'S204'])
    // No hang: the work is fixed and the test's own timeout bounds it (about 3 s on a quiet
    // 2-core machine; a loaded one may take several times that, so no wall-clock target here).
  }, 60_000)
})
