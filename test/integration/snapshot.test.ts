/** Snapshots and forks — isolation both ways, immutability, deletions, names, removal in use, hostile layers. (Issue 19.) */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { Readable } from 'node:stream'
import tar from 'tar-stream'
import { describe, expect, it } from 'vitest'
import { runtimesClosedAfterAll } from '../helpers/runtime.js'
import { runtimeState } from '../../lib/runtime.js'
import { snapshotStoreControl } from '../../lib/snapshots.js'

const runtime = runtimesClosedAfterAll()

/** A digest of every path, type, mode, owner and content under dir. */
function treeDigest(dir: string): string {
  const hash = crypto.createHash('sha256')
  const walk = (rel: string) => {
    for (const name of fs.readdirSync(path.join(dir, rel)).sort()) {
      const p = path.join(dir, rel, name)
      const st = fs.lstatSync(p)
      hash.update(`${rel}/${name} ${st.mode} ${st.uid} ${st.ino}\n`)
      if (st.isFile()) hash.update(fs.readFileSync(p))
      if (st.isDirectory()) walk(path.join(rel, name))
    }
  }
  walk('')
  return hash.digest('hex')
}

describe('snapshot and fork', () => {
  it("a fork sees the parent's files and deletions, not its later writes; the parent never sees the fork's", async () => {
    const rt = runtime()
    const parent = await rt.create({ image: 'base' })
    await parent.fs.writeFile('/workspace/app.txt', 'v1')
    await parent.exec('sh', [
      '-c',
      'mkdir -p /opt/deps && echo dep > /opt/deps/lib && rm /etc/hostname; rm -rf /usr/share && mkdir /usr/share && echo only > /usr/share/one',
    ])
    const snap = await parent.snapshot()
    await parent.fs.writeFile('/workspace/app.txt', 'v2-parent')
    await parent.fs.writeFile('/workspace/later.txt', 'later')
    const fork = await rt.create({ from: snap })
    expect(fork.image).toBe('base')
    expect((await fork.fs.readFile('/workspace/app.txt')).data.toString()).toBe('v1')
    expect((await fork.exec('cat', ['/opt/deps/lib'])).stdout).toBe('dep\n')
    expect((await fork.exec('ls', ['/usr/share'])).stdout).toBe('one\n')
    expect((await fork.exec('ls', ['/etc/hostname'])).exitCode).not.toBe(0)
    expect((await fork.exec('ls', ['/workspace/later.txt'])).exitCode).not.toBe(0)
    await fork.fs.writeFile('/workspace/app.txt', 'v3-fork')
    await fork.fs.writeFile('/workspace/fork-only', 'x')
    expect((await parent.fs.readFile('/workspace/app.txt')).data.toString()).toBe('v2-parent')
    expect((await parent.exec('ls', ['/workspace/fork-only'])).exitCode).not.toBe(0)
    // A fork of a fork carries both layers.
    const snap2 = await fork.snapshot()
    expect(snap2.parent).toBe(snap.id)
    const grandchild = await rt.create({ from: snap2.id })
    expect(
      (await grandchild.exec('sh', ['-c', 'cat /workspace/app.txt /opt/deps/lib /workspace/fork-only; ls /usr/share']))
        .stdout,
    ).toBe('v3-forkdep\nxone\n')
  })

  it("a user's private files (0600 of uid 1000 in a 0700 directory) are kept by a snapshot with their modes, though fs ops may not read them", async () => {
    const rt = runtime()
    const parent = await rt.create({ image: 'base' })
    const made = await parent.exec(
      'sh',
      ['-c', 'mkdir -m 700 /workspace/home && echo secret > /workspace/home/key && chmod 600 /workspace/home/key'],
      { user: 'sandbox' },
    )
    expect(made.exitCode).toBe(0)
    // fs ops have the workload root's permissions, which hold no capability.
    expect(await parent.fs.readFile('/workspace/home/key').catch((e) => e.code)).toBe('S215')
    const fork = await rt.create({ from: await parent.snapshot() })
    // Without root the layer's files are the host user's, root inside (docs/pool-and-snapshots.md).
    const owner = process.getuid?.() === 0 ? 'sandbox' : 'root'
    const seen = await fork.exec(
      'sh',
      ['-c', 'stat -c "%a %U" /workspace/home /workspace/home/key && cat /workspace/home/key'],
      { user: owner },
    )
    expect(seen.stdout).toBe(`700 ${owner}\n600 ${owner}\nsecret\n`)
  })

  it('a snapshot is immutable: writes, deletes and chmods through forks never change its layer; it outlives its sandbox', async () => {
    const rt = runtime()
    const parent = await rt.create({ image: 'base' })
    await parent.exec('sh', ['-c', 'mkdir -p /data && echo original > /data/f && chmod 644 /data/f'])
    const snap = await parent.snapshot({ name: 'prepared' })
    await parent.stop()
    const layer = rt.snapshots.layerDir(snap.id)
    const before = treeDigest(layer)
    const fork = await rt.create({ from: 'prepared' })
    const r = await fork.exec('sh', [
      '-c',
      'echo changed > /data/f; echo more >> /data/f; chmod 600 /data/f; rm -rf /data; mkdir /data; touch /data/new; echo x > /krunbox/layer/root/data/f',
    ])
    expect(r.stderr).not.toBe('') // /krunbox is not reachable from inside
    expect(treeDigest(layer)).toBe(before)
    const again = await rt.create({ from: snap })
    expect((await again.exec('cat', ['/data/f'])).stdout).toBe('original\n')
  })

  it('names, lists and removes snapshots; removing one in use is S109, an unknown one S108', async () => {
    const rt = runtime()
    const sb = await rt.create({ image: 'base' })
    await sb.fs.writeFile('/workspace/a', 'a')
    const snap = await sb.snapshot()
    expect(snap.name).toBeNull()
    expect(rt.snapshots.name(snap, 'mine').name).toBe('mine')
    expect(rt.snapshots.list().map((s) => [s.id, s.name])).toEqual([[snap.id, 'mine']])
    // The same layer over the same image is the same snapshot.
    expect((await sb.snapshot()).id).toBe(snap.id)
    const fork = await rt.create({ from: 'mine' })
    expect(() => rt.snapshots.remove('mine')).toThrow(expect.objectContaining({ code: 'S109' }))
    const pool = rt.pool({ from: snap.id, size: 0 })
    await fork.stop()
    expect(() => rt.snapshots.remove(snap.id)).toThrow(expect.objectContaining({ code: 'S109' }))
    await pool.close()
    rt.snapshots.remove(snap.id)
    expect(rt.snapshots.list()).toEqual([])
    expect(fs.existsSync(rt.snapshots.layerDir(snap.id))).toBe(false)
    await expect(rt.create({ from: 'mine' })).rejects.toMatchObject({ code: 'S108' })
    expect(() => rt.snapshots.remove('nope')).toThrow(expect.objectContaining({ code: 'S108' }))
    await expect(sb.snapshot({ name: '../x' })).rejects.toMatchObject({ code: 'S001' })
    await expect(rt.create({ from: 42 as never })).rejects.toMatchObject({ code: 'S001' })
  })

  it('a pool can be shaped on a snapshot: acquire({ from }) hands out prepared forks', async () => {
    const rt = runtime()
    const sb = await rt.create({ image: 'base' })
    await sb.fs.writeFile('/workspace/deps', 'installed')
    const snap = await sb.snapshot()
    const pool = rt.pool({ from: snap.id, size: 2 })
    await pool.full()
    const lease = await rt.acquire({ from: snap })
    expect(pool.stats.leased).toBe(1)
    expect((await lease.fs.readFile('/workspace/deps')).data.toString()).toBe('installed')
  })

  it('a layer whose tar would write through a link or outside the layer is refused (S220) and leaves nothing', async () => {
    const rt = runtime()
    const hostile = async (entries: (Partial<tar.Header> & { name: string; body?: string })[]) => {
      const pack = tar.pack()
      for (const { body, ...h } of entries) pack.entry(h as tar.Header, body ?? '')
      pack.finalize()
      const staging = path.join(runtimeState(rt).root, `staging-${crypto.randomUUID()}`)
      const err = await snapshotStoreControl
        .capture(
          rt.snapshots,
          Readable.from(pack as unknown as AsyncIterable<Buffer>),
          { image: 'base', imageVersion: 'x', parent: null },
          staging,
        )
        .catch((e) => e)
      expect(fs.existsSync(staging)).toBe(false)
      return err.code
    }
    expect(
      await hostile([
        { name: 'etc', type: 'symlink', linkname: '/etc' },
        { name: 'etc/passwd', type: 'file', body: 'x' },
      ]),
    ).toBe('S220')
    expect(await hostile([{ name: '../escape', type: 'file', body: 'x' }])).toBe('S220')
    expect(await hostile([{ name: '/abs', type: 'file', body: 'x' }])).toBe('S220')
    expect(
      await hostile([
        { name: 'a', type: 'file', body: 'x' },
        { name: 'b', type: 'link', linkname: '/etc/shadow' },
      ]),
    ).toBe('S220')
    expect(fs.readFileSync('/etc/passwd', 'utf8')).not.toBe('x')
    expect(rt.snapshots.list()).toEqual([])
  })

  it('files written behind the stream keep the tar order: rewrites, hard links, deletions, more files than are in flight', async () => {
    const rt = runtime()
    const pack = tar.pack()
    pack.entry({ name: 'd', type: 'directory', mode: 0o755 })
    for (let i = 0; i < 300; i++) pack.entry({ name: `d/f${i}`, mode: 0o640 }, `file ${i}`)
    pack.entry({ name: 'd/f1', mode: 0o644 }, 'rewritten')
    pack.entry({ name: 'd/f2', type: 'link', linkname: 'd/f1' })
    pack.entry({ name: 'd/f3', type: 'character-device', devmajor: 0, devminor: 0 })
    pack.entry({ name: 'd/big', mode: 0o600 }, 'b'.repeat(2 * 1024 * 1024))
    pack.finalize()
    const snap = await snapshotStoreControl.capture(
      rt.snapshots,
      Readable.from(pack as unknown as AsyncIterable<Buffer>),
      { image: 'base', imageVersion: 'x', parent: null },
      path.join(runtimeState(rt).root, 'staging'),
    )
    const root = path.join(rt.snapshots.layerDir(snap.id), 'root', 'd')
    expect(fs.readFileSync(path.join(root, 'f299'), 'utf8')).toBe('file 299')
    expect(fs.statSync(path.join(root, 'f299')).mode & 0o777).toBe(0o640)
    expect(fs.readFileSync(path.join(root, 'f1'), 'utf8')).toBe('rewritten')
    expect(fs.statSync(path.join(root, 'f2')).ino).toBe(fs.statSync(path.join(root, 'f1')).ino)
    expect(fs.existsSync(path.join(root, 'f3'))).toBe(false)
    expect(fs.statSync(path.join(root, 'big')).size).toBe(2 * 1024 * 1024)
    expect(
      JSON.parse(fs.readFileSync(path.join(rt.snapshots.layerDir(snap.id), 'markers.json'), 'utf8')).whiteouts,
    ).toEqual(['/d/f3'])
    expect(fs.readdirSync(root)).toHaveLength(300)
  })
})
