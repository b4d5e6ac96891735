/**
 * Checks the agent's JSON payloads against the contract (protocol/v1.json, via contract.gen.ts).
 * Every field table is compiled once, at load, into a closure; checking an answer then walks
 * its known fields only. A payload that does not fit throws FrameError S204, which fails the one
 * request it belongs to. Unknown fields are ignored (a newer agent may add optional ones).
 */
import {
  CONTROL_EVENT_FIELDS,
  ERROR_BODY_FIELDS,
  HELLO_RESPONSE_FIELDS,
  OPS,
  SHAPES,
  type FieldSpec,
  type FieldTable,
  type HelloResponse,
  type OpName,
  type OpResponse,
  MESSAGES,
} from './contract.gen.js'
import { FrameError } from './frame.js'

/** Returns why a value does not fit, or null. */
type Check = (value: unknown) => string | null
/** Throws FrameError S204 naming the payload and the first field that does not fit. */
export type BodyCheck = (body: Record<string, unknown>) => void

const compiledShapes = new Map<string, Check>()

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v)
}

function describe(v: unknown): string {
  if (v === null) return 'null'
  if (Array.isArray(v)) return 'an array'
  if (typeof v === 'string') return `"${v.slice(0, 40)}"`
  return typeof v === 'object' ? 'an object' : String(v).slice(0, 40)
}

function typeCheck(type: string, spec: { items?: string; values?: string }): Check {
  switch (type) {
    case 'string':
      return (v) => (typeof v === 'string' ? null : 'a string')
    case 'int':
      return (v) => (Number.isSafeInteger(v) ? null : 'an integer')
    case 'number':
      return (v) => (typeof v === 'number' && Number.isFinite(v) ? null : 'a number')
    case 'bool':
      return (v) => (typeof v === 'boolean' ? null : 'a boolean')
    case 'object':
      return (v) => (isObject(v) ? null : 'an object')
    case 'array': {
      const item = spec.items ? typeCheck(spec.items, {}) : null
      return (v) => {
        if (!Array.isArray(v)) return 'an array'
        if (item) {
          for (let i = 0; i < v.length; i++) {
            const bad = item(v[i])
            if (bad !== null) return `an array whose element ${i} is ${bad}`
          }
        }
        return null
      }
    }
    case 'map': {
      const value = spec.values ? typeCheck(spec.values, {}) : null
      return (v) => {
        if (!isObject(v)) return 'an object'
        if (value) {
          for (const k of Object.keys(v)) {
            const bad = value(v[k])
            if (bad !== null) return `an object whose ${k} is ${bad}`
          }
        }
        return null
      }
    }
    default:
      return shapeCheck(type)
  }
}

/** A named shape (commandSnapshot, ...): an object whose fields fit its table. */
function shapeCheck(name: string): Check {
  const known = compiledShapes.get(name)
  if (known) return known
  const table = SHAPES[name]
  if (!table) throw new Error(`contract names unknown shape ${name}`)
  // Shapes may refer to each other: compile lazily on first use.
  let fields: Check | null = null
  const check: Check = (v) => {
    if (!isObject(v)) return `a ${name} object`
    fields ??= fieldsCheck(table)
    const bad = fields(v)
    return bad === null ? null : `a ${name} whose ${bad}`
  }
  compiledShapes.set(name, check)
  return check
}

function fieldCheck(name: string, spec: FieldSpec): Check {
  const alternatives = spec.type.map((t) => typeCheck(t, spec))
  const allowed = new Set(spec.enum ?? [])
  return (v) => {
    if (v === undefined) return spec.optional ? null : `${name} is missing`
    if (v === null) return spec.nullable ? null : `${name} is null`
    let want: string | null = null
    for (const alt of alternatives) {
      want = alt(v)
      if (want === null) break
    }
    if (want !== null) return `${name} must be ${want}, got ${describe(v)}`
    if (spec.enum && !allowed.has(v as string)) return `${name} ${describe(v)} is not one of ${spec.enum.join(', ')}`
    return null
  }
}

function fieldsCheck(table: FieldTable): Check {
  const checks = Object.entries(table).map(([name, spec]) => [name, fieldCheck(name, spec)] as const)
  return (v) => {
    const o = v as Record<string, unknown>
    for (const [name, check] of checks) {
      const bad = check(o[name])
      if (bad !== null) return bad
    }
    return null
  }
}

function bodyCheck(what: string, table: FieldTable): BodyCheck {
  const check = fieldsCheck(table)
  return (body) => {
    const bad = check(body)
    if (bad !== null)
      throw new FrameError('S204', MESSAGES.badFrame({ subject: what, problem: `does not fit the contract: ${bad}` }))
  }
}

export interface OpChecks<O extends OpName = OpName> {
  /** Passes only a body that is the op's response as the contract states it. */
  response: (body: Record<string, unknown>) => asserts body is Record<string, unknown> & OpResponse<O>
  /** Per EVENT type; a type the contract does not list for the op is not checked (and is ignored). */
  events: ReadonlyMap<string, BodyCheck>
}

const opChecks = new Map<string, OpChecks<OpName>>(
  Object.entries(OPS).map(([op, spec]) => [
    op,
    {
      response: bodyCheck(`${op} RESPONSE`, spec.response),
      events: new Map(
        Object.entries(spec.events).map(([type, table]) => [type, bodyCheck(`${op} EVENT ${type}`, table)]),
      ),
    },
  ]),
)

/** The checks of an op's answers (every op of the contract has them). */
export function checksFor<O extends OpName>(op: O): OpChecks<O> {
  // The map is built from OPS, so its entry for op checks op's own response. An op the contract
  // does not know (only a caller that bypassed the types can name one) gets no checks.
  return (opChecks.get(op) ?? noChecks) as OpChecks<O>
}

const noChecks: OpChecks<never> = { response: () => {}, events: new Map() }

export const checkHelloResponse: (
  body: Record<string, unknown>,
) => asserts body is Record<string, unknown> & HelloResponse = bodyCheck('HELLO', HELLO_RESPONSE_FIELDS)
export const checkErrorBody = bodyCheck('ERROR', ERROR_BODY_FIELDS)

const controlEventChecks = new Map(
  Object.entries(CONTROL_EVENT_FIELDS).map(([type, table]) => [type, bodyCheck(`stream-0 EVENT ${type}`, table)]),
)

/** A stream-0 EVENT: a known type must fit its fields (throws FrameError); unknown types pass. */
export function checkControlEvent(event: Record<string, unknown>): void {
  if (typeof event.type !== 'string')
    throw new FrameError('S204', MESSAGES.badFrame({ subject: 'stream-0 EVENT', problem: 'without a type' }))
  controlEventChecks.get(event.type)?.(event)
}
