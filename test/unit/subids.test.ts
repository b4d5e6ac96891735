/**
 * Reading a user's subordinate ids the way newuidmap does, and the sandbox's map built from them:
 * only the user's own id and its listed ranges, at most 65 536 ids.
 */
import { describe, expect, it } from 'vitest'
import { subordinateIdMapping, subordinateMap, subordinateRanges } from '../../lib/drivers/subids.js'

const owner = { name: 'alice', uid: 1001 }

describe('subordinateRanges', () => {
  it('takes the lines naming the user by name or by uid, in file order', () => {
    const text = 'bob:100000:65536\nalice:200000:65536\n1001:400000:10\nalice:300000:5\n'
    expect(subordinateRanges(text, owner, 1001)).toEqual([
      { start: 200000, count: 65536 },
      { start: 400000, count: 10 },
      { start: 300000, count: 5 },
    ])
  })

  it('leaves out malformed lines, empty ranges, ranges past 2^32 - 1, ranges holding the own id and overlaps', () => {
    const text = [
      'alice:x:10',
      'alice:100:',
      'alice:100:10:1',
      ' alice : 1 : 2',
      'alice:500000:0',
      'alice:4294967290:10',
      'alice:1000:10', // holds 1001, which sandbox id 0 already is
      'alice:600000:100',
      '1001:600050:100', // the same user by uid, overlapping the line above
      'alice:700000:100',
    ].join('\n')
    expect(subordinateRanges(text, owner, 1001)).toEqual([
      { start: 600000, count: 100 },
      { start: 700000, count: 100 },
    ])
  })

  it('keeps at most four ranges (older kernels take five map lines) and nothing for another user', () => {
    const text = Array.from({ length: 6 }, (_, i) => `alice:${(i + 1) * 100000}:10`).join('\n')
    expect(subordinateRanges(text, owner, 1001)).toHaveLength(4)
    expect(subordinateRanges('bob:100000:65536\n', owner, 1001)).toEqual([])
    expect(subordinateRanges('alice:100000:65536\n', { name: null, uid: 1001 }, 1001)).toEqual([])
  })
})

describe('subordinateMap', () => {
  it('maps 0 to the own id and 1.. to the ranges, cut at 65 536 ids in all', () => {
    expect(subordinateMap(1001, [{ start: 200000, count: 1_000_000 }])).toBe('0 1001 1\n1 200000 65535\n')
    expect(
      subordinateMap(1001, [
        { start: 200000, count: 65000 },
        { start: 400000, count: 65536 },
        { start: 600000, count: 9 },
      ]),
    ).toBe('0 1001 1\n1 200000 65000\n65001 400000 535\n')
    expect(subordinateMap(1001, [])).toBeNull()
  })
})

describe('subordinateIdMapping', () => {
  it.skipIf(process.getuid?.() !== 0)('is null for root, which has its own range (idmap.ts)', async () => {
    expect(await subordinateIdMapping()).toBeNull()
  })
})
