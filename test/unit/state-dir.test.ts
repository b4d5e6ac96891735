/**
 * The state directory's retire path (issue 22): an entry leaves at once through the trash and is
 * deleted in the background, the history is trimmed by count, and trash a dead process left is
 * removed by the next sweep. Real files in a temp directory.
 */
import { spawnSync } from 'node:child_process'
import crypto from 'node:crypto'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { HISTORY_KEEP, HISTORY_TRIM_SLACK } from '../../lib/defaults.js'
import { StateDir, type SandboxRecord } from '../../lib/state.js'

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-state-'))
afterAll(() => fs.rmSync(root, { recursive: true, force: true }))

function record(id: string): SandboxRecord {
  return {
    id,
    name: null,
    image: 'base',
    imageVersion: 'v',
    driver: 'namespace',
    pid: 2,
    pidStartTime: '1',
    ownerPid: process.pid,
    createdAt: Date.now(),
    expiresAt: null,
    idleTimeoutMs: 0,
    tokenSha256: '',
    detached: false,
    metadata: { k: 'v' },
    env: {},
    cgroupDirs: [],
  }
}

async function entry(state: StateDir): Promise<string> {
  const id = crypto.randomUUID()
  await state.create(id)
  await state.write(record(id))
  // Something big enough that a recursive removal takes a while.
  for (let i = 0; i < 200; i++) fs.writeFileSync(path.join(state.controlDir(id), `f${i}`), 'x'.repeat(1024))
  return id
}

const trash = (state: StateDir) => fs.readdirSync(path.join(state.root, '.trash'))

describe('StateDir.retire', () => {
  it('takes the entry away before it resolves, keeps a history line, and deletes the rest by settled()', async () => {
    const state = new StateDir(path.join(root, 'a'))
    const ids = await Promise.all(Array.from({ length: 64 }, () => entry(state)))
    await Promise.all(ids.map((id) => state.retire(id, 'user_killed')))
    expect(state.ids()).toEqual([])
    const kept = new Set(state.history().map((h) => h.id))
    expect(ids.every((id) => kept.has(id))).toBe(true)
    expect(state.history()[0]).toMatchObject({ reason: 'user_killed', metadata: { k: 'v' } })
    await state.settled()
    expect(trash(state)).toEqual([])
    // Idempotent: a second retire of a gone entry changes nothing.
    await state.retire(ids[0], 'crashed')
    await state.settled()
    expect(state.history().find((h) => h.id === ids[0])?.reason).toBe('user_killed')
  })

  it('keeps the newest HISTORY_KEEP lines, trimming once the slack is used up', async () => {
    const state = new StateDir(path.join(root, 'b'))
    const dir = path.join(state.root, '.history')
    const old = Date.now() / 1000 - 3600
    const names = Array.from({ length: HISTORY_KEEP + HISTORY_TRIM_SLACK }, (_, i) => {
      const file = path.join(dir, `${crypto.randomUUID()}.json`)
      fs.writeFileSync(file, JSON.stringify({ id: path.basename(file, '.json'), endedAt: i }))
      fs.utimesSync(file, old + i, old + i)
      return path.basename(file)
    })
    expect(state.history()).toHaveLength(HISTORY_KEEP)
    const newest = await entry(state)
    await state.retire(newest, 'user_killed')
    await state.settled()
    const left = new Set(fs.readdirSync(dir))
    expect(left.size).toBe(HISTORY_KEEP)
    expect(left.has(`${newest}.json`)).toBe(true)
    // What went is the oldest.
    expect(names.slice(0, HISTORY_TRIM_SLACK + 1).some((n) => left.has(n))).toBe(false)
  })

  it('retireSync finishes everything before it returns (the host exit path)', async () => {
    const state = new StateDir(path.join(root, 'c'))
    const id = await entry(state)
    state.retireSync(id, 'host_exit')
    expect(fs.existsSync(state.sandboxDir(id))).toBe(false)
    expect(state.history()[0]).toMatchObject({ id, reason: 'host_exit' })
  })

  it('removes trash a dead process left behind, and never a live process’s', async () => {
    const state = new StateDir(path.join(root, 'd'))
    const dead = spawnSync('/bin/sh', ['-c', 'echo $$'], { encoding: 'utf8' }).stdout.trim()
    const abandoned = path.join(state.root, '.trash', `${dead}-${crypto.randomUUID()}`)
    const someoneElses = path.join(state.root, '.trash', `1-${crypto.randomUUID()}`)
    for (const d of [abandoned, someoneElses]) fs.mkdirSync(path.join(d, 'ctl'), { recursive: true })
    state.removeAbandonedTrash()
    await state.settled()
    expect(trash(state)).toEqual([path.basename(someoneElses)])
  })
})

describe('StateDir.exitReason', () => {
  it("reads the reaper's history line while the reaper empties the entry in place (exit.json gone, the directory not yet)", async () => {
    const state = new StateDir(path.join(root, 'exit-reason'))
    const id = await entry(state)
    fs.writeFileSync(path.join(state.controlDir(id), 'exit.json'), JSON.stringify({ reason: 'ttl_expired' }))
    expect(state.exitReason(id)).toBe('ttl_expired')
    // What krunbox_reaper.c's retire() does: the history line first, then the entry's files one by one.
    fs.writeFileSync(
      path.join(state.root, '.history', `${id}.json`),
      JSON.stringify({ id, endedAt: 1, reason: 'ttl_expired' }),
    )
    fs.rmSync(path.join(state.controlDir(id), 'exit.json'))
    expect(fs.existsSync(state.sandboxDir(id))).toBe(true)
    // Before, this answered null and the attached handle reported the sandbox crashed.
    expect(state.exitReason(id)).toBe('ttl_expired')
  })
})
