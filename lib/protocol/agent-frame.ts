/**
 * What one frame from the agent on a request stream means, decoded and checked against the
 * contract, with no side effect: AgentStream acts on the result; the fuzz test feeds it junk.
 * Throws FrameError (S203 over the cap, S204 anything else the contract does not allow).
 */
import {
  decodeJson,
  decodeOutput,
  decodeWindow,
  FLAG_END,
  type Frame,
  FrameError,
  FrameType,
  isKnownType,
  MAX_PAYLOAD,
  type OutputChunkFrame,
} from './frame.js'
import { MESSAGES, type OpName, type OpResponse } from './contract.gen.js'
import { checkErrorBody, type OpChecks } from './validate.js'

export type AgentFrame<O extends OpName = OpName> =
  | { kind: 'response'; body: OpResponse<O> }
  | { kind: 'error'; body: Record<string, unknown> }
  | { kind: 'event'; event: Record<string, unknown> & { type: string } }
  | { kind: 'output'; chunk: OutputChunkFrame }
  | { kind: 'data'; data: Buffer }
  | { kind: 'window'; bytes: number }

function hasType(event: Record<string, unknown>): event is Record<string, unknown> & { type: string } {
  return typeof event.type === 'string'
}

export function readAgentFrame<O extends OpName>(frame: Frame, checks: OpChecks<O>): AgentFrame<O> {
  if (frame.oversized !== undefined)
    throw new FrameError(
      'S203',
      MESSAGES.frameTooLarge({ what: `frame of ${frame.oversized} bytes`, capBytes: MAX_PAYLOAD }),
    )
  if (!isKnownType(frame.type))
    throw new FrameError(
      'S204',
      MESSAGES.badFrame({ subject: `frame type 0x${Number(frame.type).toString(16)}`, problem: 'is unknown' }),
    )
  switch (frame.type) {
    case FrameType.RESPONSE:
    case FrameType.ERROR: {
      const response = frame.type === FrameType.RESPONSE
      const body = decodeJson(frame.payload, response ? 'RESPONSE' : 'ERROR')
      if ((frame.flags & FLAG_END) === 0)
        throw new FrameError(
          'S204',
          MESSAGES.badFrame({ subject: `final frame on stream ${frame.stream}`, problem: 'lacks the END flag' }),
        )
      if (!response) {
        checkErrorBody(body)
        return { kind: 'error', body }
      }
      checks.response(body)
      return { kind: 'response', body }
    }
    case FrameType.EVENT: {
      const event = decodeJson(frame.payload, 'EVENT')
      if (!hasType(event))
        throw new FrameError(
          'S204',
          MESSAGES.badFrame({ subject: `EVENT on stream ${frame.stream}`, problem: 'has no type' }),
        )
      // A type the op does not list is passed on unchecked: a newer agent may send more.
      checks.events.get(event.type)?.(event)
      return { kind: 'event', event }
    }
    case FrameType.OUTPUT:
      return { kind: 'output', chunk: decodeOutput(frame.payload) }
    case FrameType.DATA:
      return { kind: 'data', data: frame.payload }
    case FrameType.WINDOW:
      return { kind: 'window', bytes: decodeWindow(frame.payload) }
    default:
      throw new FrameError(
        'S204',
        MESSAGES.badFrame({
          subject: `frame type 0x${frame.type.toString(16)}`,
          problem: 'is not valid on a request stream',
        }),
      )
  }
}
