/**
 * An export's target is a path in a directory another local user may write to. A link (or
 * anything) planted at the target beforehand is never written through nor replaced (S213). While
 * the export runs (held between the staging directory's creation and its rename), the staging
 * directory swapped for a link to a victim directory, or the target's
 * whole directory renamed away and replaced by such a link, gets nothing into the victim: every
 * write goes through the descriptors the export opened, and a staging directory that is not its
 * own any more is refused at the end.
 */
import { execFileSync, spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import fs from 'node:fs'
import fsp from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { isSandboxError, type Runtime, type SnapshotInfo } from '../../lib/index.js'
import { repoRoot } from '../images/helpers.js'
import { runtimesClosedAfterAll } from '../helpers/runtime.js'

const runtime = runtimesClosedAfterAll()
let work: string
let rt: Runtime
let snap: SnapshotInfo

beforeAll(async () => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-export-target-'))
  rt = runtime()
  const sb = await rt.create({ image: 'base' })
  await sb.exec('sh', ['-c', 'echo written > /workspace/f'])
  snap = await sb.snapshot()
  await sb.stop()
  // Both layers are made once here, so the runs below only copy them.
  await rt.snapshots.export(snap, { layout: path.join(work, 'warm') })
}, 120_000)

afterAll(() => fs.rmSync(work, { recursive: true, force: true }))

/** A directory every local user may write to (not sticky), holding a victim the attacker aims at. */
function shared(name: string): { dir: string; victim: string } {
  const dir = path.join(work, name)
  const victim = path.join(work, `${name}-victim`)
  fs.mkdirSync(dir)
  fs.chmodSync(dir, 0o777)
  fs.mkdirSync(victim)
  return { dir, victim }
}

describe('export: a link planted at the target', () => {
  for (const key of ['layout', 'archive'] as const) {
    it(`${key}: a link at the target, to a directory or to a new name, is refused (S213) and left as it is`, async () => {
      const { dir, victim } = shared(`planted-${key}`)
      fs.symlinkSync(victim, path.join(dir, 'to-dir'))
      fs.symlinkSync(path.join(victim, 'new'), path.join(dir, 'to-new'))
      for (const link of ['to-dir', 'to-new']) {
        const err = await rt.snapshots.export(snap, { [key]: path.join(dir, link) }).catch((e: unknown) => e)
        expect(isSandboxError(err, 'S213'), String(err)).toBe(true)
        expect(fs.readlinkSync(path.join(dir, link))).toMatch(new RegExp(`^${victim}`))
      }
      expect(fs.readdirSync(victim)).toEqual([])
      expect(fs.readdirSync(dir).sort()).toEqual(['to-dir', 'to-new'])
    })
  }
})

const EMPTY = `sha256:${createHash('sha256').digest('hex')}`

/**
 * Exports the snapshot to `target` in another process and runs `attack(stagingName)` while that
 * export is held between creating its staging directory and putting it in place. The hold is
 * the test's own: the snapshot's kept layer (a private file of the state directory) is replaced
 * by a FIFO, whose copy into the layout waits until the attack is done and the FIFO is opened.
 */
/** Resolves once `file` exists, woken by its parent directory's changes (made first if need be). */
async function appears(file: string): Promise<void> {
  const parent = path.dirname(file)
  if (!fs.existsSync(parent)) await appears(parent)
  await new Promise<void>((resolve) => {
    const watcher = fs.watch(parent, () => {
      if (fs.existsSync(file)) done()
    })
    const done = () => {
      watcher.close()
      resolve()
    }
    if (fs.existsSync(file)) done()
  })
}

/**
 * Opens the FIFO's write end and closes it, so the held copy reads an empty layer. The open waits
 * for the export's reader off the main thread; an export that died holds none, and a reader of
 * our own then lets that open end.
 */
async function releaseFifo(fifo: string, exited: Promise<void>): Promise<void> {
  const writer = fsp.open(fifo, 'w')
  const exportGone = await Promise.race([writer.then(() => false), exited.then(() => true)])
  const reader = exportGone ? fs.openSync(fifo, fs.constants.O_RDONLY | fs.constants.O_NONBLOCK) : null
  await (await writer).close()
  if (reader !== null) fs.closeSync(reader)
}

async function attackedExport(
  dir: string,
  target: string,
  attack: (staging: string) => void,
): Promise<{ code?: string; message?: string; target?: string }> {
  const exportsDir = path.join(rt.snapshots.root, '.exports')
  const record = path.join(
    exportsDir,
    fs.readdirSync(exportsDir).find((n) => n.startsWith(snap.id) && n.endsWith('.json'))!,
  )
  const kept = fs.readFileSync(record, 'utf8')
  const fifo = record.replace(/\.json$/, `-${EMPTY.slice('sha256:'.length)}.tar.gz`)
  fs.writeFileSync(
    record,
    JSON.stringify({ digest: EMPTY, size: 0, diffId: EMPTY, mediaType: JSON.parse(kept).mediaType }),
  )
  execFileSync('mkfifo', [fifo])
  try {
    const staged = new Promise<string>((resolve) => {
      const watcher = fs.watch(dir, (_event, name) => {
        if (typeof name === 'string' && name.startsWith(`.${path.basename(target)}.`) && name.endsWith('.export')) {
          watcher.close()
          resolve(name)
        }
      })
    })
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        path.join(repoRoot, 'test', 'security', 'fixtures', 'oci-export-snapshot.ts'),
        path.dirname(rt.snapshots.root),
        snap.id,
        target,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    )
    let out = ''
    child.stdout.on('data', (d: Buffer) => (out += d.toString()))
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
    const ended = exited.then(() => Promise.reject(new Error(`the export ended before it staged anything: ${out}`)))
    const name = await Promise.race([staged, ended])
    // Held at the FIFO: the export has opened its staging directory and made blobs/sha256 in it.
    await Promise.race([appears(path.join(dir, name, 'blobs', 'sha256')), ended])
    try {
      expect(fs.existsSync(target)).toBe(false)
      attack(name)
    } finally {
      // Opening the FIFO's other end lets the held copy go on (it reads an empty layer); never
      // blocking: an export the attack killed holds no reader.
      await releaseFifo(fifo, exited)
    }
    await exited
    return JSON.parse(out) as { code?: string; message?: string; target?: string }
  } finally {
    fs.rmSync(fifo, { force: true })
    fs.writeFileSync(record, kept)
  }
}

describe('export: the target swapped while the export runs', () => {
  it('the staging directory replaced by a link to a victim: nothing reaches the victim, the export fails (S213)', async () => {
    const { dir, victim } = shared('swap-staging')
    const target = path.join(dir, 'out')
    const result = await attackedExport(dir, target, (staging) => {
      fs.renameSync(path.join(dir, staging), path.join(dir, 'taken-away'))
      fs.symlinkSync(victim, path.join(dir, staging))
    })
    expect(result.code).toBe('S213')
    expect(fs.readdirSync(victim)).toEqual([])
    // What the export wrote went into its own directory, wherever the attacker moved it.
    expect(fs.readdirSync(path.join(dir, 'taken-away')).sort()).toEqual(['blobs', 'index.json', 'oci-layout'])
  }, 120_000)

  it("the target's directory renamed away and replaced by a link to a victim: the layout lands in the directory it opened", async () => {
    const { dir, victim } = shared('swap-parent')
    const target = path.join(dir, 'out')
    const result = await attackedExport(dir, target, () => {
      fs.renameSync(dir, `${dir}-moved`)
      fs.symlinkSync(victim, dir)
    })
    expect(result.code).toBeUndefined()
    expect(fs.readdirSync(victim)).toEqual([])
    expect(fs.readdirSync(path.join(`${dir}-moved`, 'out')).sort()).toEqual(['blobs', 'index.json', 'oci-layout'])
    expect(fs.readdirSync(`${dir}-moved`)).toEqual(['out'])
  }, 120_000)

  it('an export killed while it staged leaves its staging directory to the next export to that target, which removes it', async () => {
    const { dir } = shared('killed-staging')
    const target = path.join(dir, 'out')
    let left = ''
    // Killed where it is held: the staging directory's name carries its process id.
    await attackedExport(dir, target, (staging) => {
      left = staging
      process.kill(Number(/^\.out\.(\d+)-/.exec(staging)![1]), 'SIGKILL')
    }).catch(() => null)
    expect(fs.existsSync(path.join(dir, left))).toBe(true)
    // Not ours to remove: one of a live process (this one), one of another user.
    const live = `.out.${process.pid}-${fs.readFileSync('/proc/self/stat', 'utf8').split(') ')[1]!.split(' ')[19]}-${'a'.repeat(16)}.export`
    const foreign = `.out.999999999-1-${'b'.repeat(16)}.export`
    for (const n of [live, foreign]) fs.mkdirSync(path.join(dir, n))
    fs.chownSync(path.join(dir, foreign), 65534, 65534)
    await rt.snapshots.export(snap, { layout: target })
    expect(fs.readdirSync(target).sort()).toEqual(['blobs', 'index.json', 'oci-layout'])
    expect(fs.readdirSync(dir).sort()).toEqual([foreign, live, 'out'].sort())
  }, 120_000)
})
