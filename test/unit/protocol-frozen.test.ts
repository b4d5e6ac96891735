/**
 * The wire of protocol v1 is frozen: protocol/v1.wire.json is the contract (protocol/v1.json)
 * without its prose (comments, docs, summaries, message templates, meanings, groups). A change to
 * frames, ops, fields, types, events, statuses or codes fails here until that file is updated in
 * the same change, so it shows as its own diff in review; a change an older peer would not
 * understand also needs a new version (the handshake refuses a peer of another one, S201).
 */
import fs from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'

const ROOT = path.resolve(import.meta.dirname, '../..')
// go names the agent's Go type for a field: a binding of the contract, not part of the wire.
const PROSE = new Set(['$comment', 'doc', 'summary', 'message', 'meaning', 'group', 'go'])

/** The contract with every prose key removed, at any depth. */
function wireOf(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(wireOf)
  if (value === null || typeof value !== 'object') return value
  return Object.fromEntries(
    Object.entries(value)
      .filter(([k]) => !PROSE.has(k))
      .map(([k, v]) => [k, wireOf(v)]),
  )
}

const read = (rel: string) => JSON.parse(fs.readFileSync(path.join(ROOT, rel), 'utf8'))

describe('the frozen v1 wire', () => {
  it('protocol/v1.json carries exactly the wire frozen in protocol/v1.wire.json (update both together when the wire changes)', () => {
    expect(wireOf(read('protocol/v1.json'))).toEqual(read('protocol/v1.wire.json'))
  })

  it('prose may change freely, a field may not', () => {
    const contract = read('protocol/v1.json')
    const reworded = structuredClone(contract)
    reworded.errors[0].summary = 'said another way'
    expect(wireOf(reworded)).toEqual(wireOf(contract))
    const renamed = structuredClone(contract)
    const fields = renamed.ops['exec.start'].request
    fields.workdir = fields.cwd
    delete fields.cwd
    expect(wireOf(renamed)).not.toEqual(read('protocol/v1.wire.json'))
  })
})
