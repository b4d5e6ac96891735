/**
 * The sandbox controls the files an export turns into a layer. Links to host paths stay links
 * (nothing of the host is read through them), names OCI reserves for deletions are refused
 * rather than deleting from the image underneath, setuid never reaches a layer, a sparse file is
 * exported at its size and refused over the snapshot cap, a path past the host's PATH_MAX is a
 * coded error, and a million files are exported in bounded memory. Each failure leaves nothing.
 */
import { execFileSync, spawnSync } from 'node:child_process'
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { gunzipSync } from 'node:zlib'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { isSandboxError, type Runtime, type Sandbox } from '../../lib/index.js'
import { layerEntries, stagingLeft } from '../images/oci-export-helpers.js'
import { repoRoot } from '../images/helpers.js'
import { runtimesClosedAfterAll } from '../helpers/runtime.js'

const runtime = runtimesClosedAfterAll()
let work: string

beforeAll(() => {
  work = fs.mkdtempSync(path.join(os.tmpdir(), 'krunbox-export-layer-'))
})
afterAll(() => fs.rmSync(work, { recursive: true, force: true }))

/** The sandbox's own layer (the last) of an exported layout. */
function writesLayer(layout: string, result: { layers: Array<{ digest: string }> }): string {
  return path.join(layout, 'blobs', 'sha256', result.layers.at(-1)!.digest.slice('sha256:'.length))
}

async function refused(sb: Sandbox, layout: string): Promise<Error & { code: string }> {
  const err = await sb.commit({ layout }).then(
    () => null,
    (e: unknown) => e,
  )
  if (!isSandboxError(err)) throw new Error(`expected a SandboxError, got ${String(err)}`)
  expect(fs.existsSync(layout)).toBe(false)
  expect(stagingLeft(path.dirname(layout))).toEqual([])
  return err
}

/** Nothing a commit staged in the sandbox's state directory is left. */
function stateLeft(rt: Runtime, sb: Sandbox): string[] {
  const dir = path.join(path.dirname(rt.snapshots.root), sb.id)
  return fs.existsSync(dir) ? fs.readdirSync(dir).filter((n) => n.startsWith('commit-')) : []
}

describe('export: what the sandbox wrote', () => {
  it('links to host paths are written as links: nothing of the host is read through them', async () => {
    const rt = runtime()
    const sb = await rt.create({ image: 'base' })
    await sb.exec('sh', [
      '-c',
      [
        'ln -s /etc/shadow /workspace/abs',
        'ln -s ../../../../../../../../etc/shadow /workspace/up',
        'ln -s / /workspace/root',
        'ln -s /etc /workspace/etc',
      ].join(' && '),
    ])
    const layout = path.join(work, 'links')
    const result = await sb.commit({ layout })
    const entries = layerEntries(writesLayer(layout, result))
    for (const [name, target] of [
      ['workspace/abs', '/etc/shadow'],
      ['workspace/up', '../../../../../../../../etc/shadow'],
      ['workspace/root', '/'],
      ['workspace/etc', '/etc'],
    ])
      expect(entries.find((e) => e.includes(` ${name} -> `))).toMatch(new RegExp(`^l.* ${name} -> ${target}$`))
    expect(entries.filter((e) => e.includes(' workspace/etc/') || e.includes(' workspace/root/'))).toEqual([])
    // Not a byte of the host's files is in the layer.
    const tar = gunzipSync(fs.readFileSync(writesLayer(layout, result)))
    const shadow = fs.readFileSync('/etc/shadow', 'utf8').split('\n')[0]!
    expect(tar.includes(Buffer.from(shadow))).toBe(false)
  })

  it('names OCI reserves for deletions (.wh.*) are refused (S102 naming them), not turned into deletions', async () => {
    const rt = runtime()
    for (const [dir, name] of [
      ['/etc', '.wh.passwd'],
      ['/workspace', '.wh..wh..opq'],
    ]) {
      const sb = await rt.create({ image: 'base' })
      await sb.exec('sh', ['-c', `touch ${dir}/${name}`], { user: '0' })
      const err = await refused(sb, path.join(work, `wh-${name}`))
      expect(err.code).toBe('S102')
      expect(err.message).toContain(`${dir}/${name}`)
      expect(stateLeft(rt, sb)).toEqual([])
      await sb.stop()
    }
  })

  it('setuid and setgid never reach a layer, set in the sandbox or planted in a stored snapshot', async () => {
    const rt = runtime()
    const sb = await rt.create({ image: 'base' })
    await sb.exec('sh', ['-c', 'cp /bin/busybox /workspace/suid && chmod 6755 /workspace/suid'], { user: '0' })
    const snap = await sb.snapshot()
    // The store is the host's: a file planted there with the bits (as a broken or older store could hold it).
    const planted = path.join(rt.snapshots.layerDir(snap.id), 'root', 'workspace', 'planted')
    fs.writeFileSync(planted, 'x')
    fs.chmodSync(planted, 0o6755)
    const layout = path.join(work, 'suid')
    const result = await rt.snapshots.export(snap, { layout })
    const entries = layerEntries(writesLayer(layout, result))
    expect(entries.find((e) => e.endsWith(' workspace/suid'))).toMatch(/^-rwxr-xr-x /)
    expect(entries.find((e) => e.endsWith(' workspace/planted'))).toMatch(/^-rwxr-xr-x /)
  })

  it('a sparse file is exported at its size in a small blob; one over the snapshot cap is refused (S404)', async () => {
    const rt = runtime()
    const sb = await rt.create({ image: 'base' })
    await sb.exec('sh', ['-c', 'truncate -s 256M /workspace/sparse && printf end >> /workspace/sparse'])
    const layout = path.join(work, 'sparse')
    const result = await sb.commit({ layout })
    expect(result.layers.at(-1)!.size).toBeLessThan(2 * 1024 * 1024)
    expect(layerEntries(writesLayer(layout, result)).find((e) => e.endsWith(' workspace/sparse'))).toContain(
      ` ${256 * 1024 * 1024 + 3} `,
    )
    await sb.exec('sh', ['-c', 'truncate -s 17G /workspace/huge'])
    const err = await refused(sb, path.join(work, 'huge'))
    expect(err.code).toBe('S404')
    expect(err.message).toContain('/workspace/huge')
    expect(stateLeft(rt, sb)).toEqual([])
  }, 120_000)

  it('a path longer than the host can name (100 KB) is a coded error, leaving nothing', async () => {
    const rt = runtime()
    const sb = await rt.create({ image: 'base' })
    const part = 'd'.repeat(250)
    const made = await sb.exec('sh', [
      '-c',
      // Each step names short paths only: the directory grows from the bottom (a shell cannot cd past PATH_MAX).
      `cd /workspace && mkdir D && echo deep > D/f && for i in $(seq 400); do mkdir T && mv D T/${part} && mv T D || exit 1; done`,
    ])
    expect(made.exitCode).toBe(0)
    const err = await refused(sb, path.join(work, 'deep'))
    // The snapshot the commit takes cannot store it (ENAMETOOLONG); the message stays short.
    expect(err.code).toBe('S220')
    expect(err.message.length).toBeLessThan(1024)
    expect(stateLeft(rt, sb)).toEqual([])
    expect((await sb.exec('sh', ['-c', 'echo alive'])).stdout).toBe('alive\n')
  })

  it('a million empty files are exported in bounded memory (a heap of 32 MiB)', async () => {
    const rt = runtime()
    const sb = await rt.create({ image: 'base' })
    await sb.exec('sh', ['-c', 'mkdir /workspace/many && touch /workspace/many/0'])
    const snap = await sb.snapshot()
    await sb.stop()
    // The store's copy of the layer gets the rest (as a snapshot of the sandbox would write them).
    const many = path.join(rt.snapshots.layerDir(snap.id), 'root', 'workspace', 'many')
    execFileSync('sh', ['-c', 'seq 1 999999 | xargs touch'], { cwd: many })
    const layout = path.join(work, 'many')
    const child = spawnSync(
      process.execPath,
      [
        '--max-old-space-size=32',
        '--import',
        'tsx',
        path.join(repoRoot, 'test', 'security', 'fixtures', 'oci-export-snapshot.ts'),
        path.dirname(rt.snapshots.root),
        snap.id,
        layout,
      ],
      { encoding: 'utf8', timeout: 600_000 },
    )
    expect(child.stderr).toBe('')
    expect(child.status).toBe(0)
    const result = JSON.parse(child.stdout) as { code?: string; layers: Array<{ digest: string }> }
    expect(result.code).toBeUndefined()
    const listed = execFileSync('sh', ['-c', `tar -tzf ${writesLayer(layout, result)} | grep -c '^workspace/many/.'`], {
      encoding: 'utf8',
    })
    expect(Number(listed)).toBe(1_000_000)
  }, 900_000)
})
