/**
 * Shared pieces of the export tests: a listing of a root filesystem as a sandbox sees it (run
 * inside one) or as a tree on the host (umoci's unpack, an image in a cache), in one format, so
 * that a round trip can be compared entry by entry: path, type, permission bits, owners, size,
 * and a file's content digest or a link's target.
 */
import { createHash } from 'node:crypto'
import { spawnSync } from 'node:child_process'
import fs from 'node:fs'
import path from 'node:path'
import type { Sandbox } from '../../lib/index.js'

/** Mount points a sandbox has of its own (their contents are not the image's). */
const SKIP = new Set(['/', '/proc', '/sys', '/dev', '/tmp'])
const under = (p: string) => [...SKIP].some((s) => s !== '/' && p.startsWith(`${s}/`))

/** `path|kind|mode|uid|gid|size|digest-or-target` for every entry but the mount points, sorted. */
export async function sandboxListing(sb: Sandbox): Promise<string[]> {
  const script = [
    'find / -xdev | while read -r p; do',
    `  s=$(stat -c '%F|%a|%u|%g|%s' "$p")`,
    '  case "$s" in',
    '    directory*) echo "$p|d|$(echo "$s" | cut -d"|" -f2-4)||" ;;',
    '    "symbolic link"*) echo "$p|l|$(echo "$s" | cut -d"|" -f2-4)||$(readlink "$p")" ;;',
    '    regular*) h=$(sha256sum "$p" 2>/dev/null | cut -c1-16); echo "$p|f|$(echo "$s" | cut -d"|" -f2-5)|${h:--}" ;;',
    '    *) echo "$p|other|$s" ;;',
    '  esac',
    'done',
  ].join('\n')
  const r = await sb.exec('sh', ['-c', script], { user: '0', maxBuffer: 64 * 1024 * 1024 })
  if (r.exitCode !== 0) throw new Error(`listing failed: ${r.stderr}`)
  return r.stdout
    .split('\n')
    .filter((l) => l !== '')
    .filter((l) => {
      const p = l.slice(0, l.indexOf('|'))
      return !SKIP.has(p) && !under(p)
    })
    .sort()
}

/**
 * The same listing of a tree on the host; `shift` is subtracted from owners (an image cache's
 * tree on a root host). Digests the sandbox could not read (`-` in `like`) are `-` here too.
 */
export function hostListing(root: string, options: { shift?: number; like?: string[] } = {}): string[] {
  const shift = options.shift ?? 0
  const unreadable = new Set((options.like ?? []).filter((l) => l.endsWith('|-')).map((l) => l.split('|')[0]))
  const out: string[] = []
  const walk = (rel: string) => {
    for (const name of fs.readdirSync(path.join(root, rel))) {
      const p = `${rel}/${name}`
      const abs = path.join(root, p)
      const st = fs.lstatSync(abs)
      const own = `${(st.mode & 0o7777).toString(8)}|${st.uid - shift}|${st.gid - shift}`
      if (!SKIP.has(p) && !under(p)) {
        if (st.isDirectory()) out.push(`${p}|d|${own}||`)
        else if (st.isSymbolicLink()) out.push(`${p}|l|${own}||${fs.readlinkSync(abs)}`)
        else if (st.isFile()) {
          const digest = unreadable.has(p)
            ? '-'
            : createHash('sha256').update(fs.readFileSync(abs)).digest('hex').slice(0, 16)
          out.push(`${p}|f|${own}|${st.size}|${digest}`)
        } else out.push(`${p}|other`)
      }
      if (st.isDirectory()) walk(p)
    }
  }
  walk('')
  return out.sort()
}

/** Runs a program and returns its stdout; throws with its stderr when it fails. */
export function run(program: string, args: string[]): string {
  const r = spawnSync(program, args, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 })
  if (r.status !== 0) throw new Error(`${program} ${args.join(' ')} failed (${r.status}): ${r.stderr}`)
  return r.stdout
}

/** umoci's unpack of `layout:tag` into `bundle`; its root filesystem. */
export function umociUnpack(layout: string, tag: string, bundle: string): string {
  run('umoci', ['unpack', '--image', `${layout}:${tag}`, bundle])
  return path.join(bundle, 'rootfs')
}

/** The entries of a layer blob (gzip or plain tar), as `tar -tv` lists them. */
export function layerEntries(blob: string): string[] {
  return run('tar', ['-tvf', blob, '--numeric-owner'])
    .split('\n')
    .filter((l) => l !== '')
}

/** A layout's manifest (the one index.json names) and its config. */
export function layoutImage(layout: string): { manifest: any; config: any } {
  const blob = (digest: string) => path.join(layout, 'blobs', 'sha256', digest.slice('sha256:'.length))
  const index = JSON.parse(fs.readFileSync(path.join(layout, 'index.json'), 'utf8'))
  const manifest = JSON.parse(fs.readFileSync(blob(index.manifests[0].digest), 'utf8'))
  const config = JSON.parse(fs.readFileSync(blob(manifest.config.digest), 'utf8'))
  return { manifest, config }
}

/** Whether anything in `dir` is named like an export's staging (a hidden `.<name>.<hex>.export` or `.tmp`). */
export function stagingLeft(dir: string): string[] {
  return fs.readdirSync(dir).filter((n) => /\.export$|\.tmp$/.test(n))
}
