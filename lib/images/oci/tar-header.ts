/**
 * Tar headers for the layers and archives an export writes: POSIX ustar, with a PAX extended
 * header in front of an entry whose path, link target, ids or size do not fit ustar's fields
 * (a path of 100 KB, a file of 16 GiB). Every reader of image layers (Go's archive/tar in
 * skopeo, umoci and Docker, tar-stream here, GNU tar) reads both.
 */

export type TarKind = 'file' | 'directory' | 'symlink' | 'hardlink'

export interface TarHeader {
  /** Relative path; a directory's gets a trailing slash here. */
  name: string
  kind: TarKind
  /** Permission bits (setuid/setgid/sticky included as given). */
  mode: number
  uid: number
  gid: number
  /** Content bytes (files only). */
  size: number
  /** Seconds since the epoch. */
  mtime: number
  /** Symlink target, or the path of the hard link's earlier entry. */
  linkname?: string
}

export const BLOCK = 512
/** Two zero blocks end an archive. */
export const TAR_END = Buffer.alloc(2 * BLOCK)

const TYPEFLAG: Record<TarKind, string> = { file: '0', hardlink: '1', symlink: '2', directory: '5' }
/** ustar's numeric fields: octal digits and a NUL in 8 bytes (ids, mode) or 12 (size, mtime). */
const MAX_ID = 0o7777777
const MAX_SIZE = 0o77777777777

/** The zero bytes that pad `size` content bytes to a whole block. */
export function padding(size: number): Buffer {
  const rest = size % BLOCK
  return rest === 0 ? Buffer.alloc(0) : Buffer.alloc(BLOCK - rest)
}

/** The header block(s) of one entry: a PAX header first when a value does not fit ustar. */
export function encodeHeader(h: TarHeader): Buffer {
  const name = h.kind === 'directory' && !h.name.endsWith('/') ? `${h.name}/` : h.name
  const linkname = h.linkname ?? ''
  let pax: Array<[string, string]> | null = null
  const add = (key: string, value: string) => (pax ??= []).push([key, value])
  if (name.length > 33 && Buffer.byteLength(name) > 100) add('path', name)
  if (linkname.length > 33 && Buffer.byteLength(linkname) > 100) add('linkpath', linkname)
  if (h.uid > MAX_ID) add('uid', String(h.uid))
  if (h.gid > MAX_ID) add('gid', String(h.gid))
  if (h.size > MAX_SIZE) add('size', String(h.size))
  const ustar = ustarBlock({
    name,
    typeflag: TYPEFLAG[h.kind],
    mode: h.mode & 0o7777,
    uid: Math.min(h.uid, MAX_ID),
    gid: Math.min(h.gid, MAX_ID),
    size: h.kind === 'file' ? Math.min(h.size, MAX_SIZE) : 0,
    mtime: Math.max(0, Math.min(Math.floor(h.mtime), MAX_SIZE)),
    linkname,
  })
  if (pax === null) return ustar
  const body = Buffer.from((pax as Array<[string, string]>).map(([k, v]) => paxRecord(k, v)).join(''))
  const paxHeader = ustarBlock({
    name: `PaxHeaders/${name.replace(/\/+$/, '').split('/').pop() ?? ''}`,
    typeflag: 'x',
    mode: 0o644,
    uid: 0,
    gid: 0,
    size: body.length,
    mtime: 0,
    linkname: '',
  })
  return Buffer.concat([paxHeader, body, padding(body.length), ustar])
}

/** "<length> <key>=<value>\n", where length counts the whole record, its own digits included. */
function paxRecord(key: string, value: string): string {
  const rest = ` ${key}=${value}\n`
  const restBytes = Buffer.byteLength(rest)
  let length = restBytes + String(restBytes).length
  if (String(length).length !== String(restBytes).length) length = restBytes + String(length).length
  return `${length}${rest}`
}

interface UstarFields {
  /** Written up to 100 bytes, never cutting a UTF-8 sequence (a longer value is in the PAX header). */
  name: string
  typeflag: string
  mode: number
  uid: number
  gid: number
  size: number
  mtime: number
  linkname: string
}

/** A header block with the magic and version set, and the checksum field as eight spaces (as it is summed). */
const TEMPLATE = (() => {
  const block = Buffer.alloc(BLOCK)
  block.write('ustar\u000000', 257, 'latin1')
  block.fill(0x20, 148, 156)
  return block
})()

function ustarBlock(f: UstarFields): Buffer {
  const block = Buffer.allocUnsafe(BLOCK)
  TEMPLATE.copy(block)
  if (f.name !== '') block.write(f.name, 0, 100, 'utf8')
  octal(block, 100, 8, f.mode)
  octal(block, 108, 8, f.uid)
  octal(block, 116, 8, f.gid)
  octal(block, 124, 12, f.size)
  octal(block, 136, 12, f.mtime)
  block[156] = f.typeflag.charCodeAt(0)
  if (f.linkname !== '') block.write(f.linkname, 157, 100, 'utf8')
  let sum = 0
  for (let i = 0; i < BLOCK; i += 1) sum += block[i]!
  octal(block, 148, 7, sum)
  block[155] = 0x20
  return block
}

/** `value` as width - 1 octal digits and a NUL. */
function octal(block: Buffer, offset: number, width: number, value: number): void {
  let v = value
  for (let i = offset + width - 2; i >= offset; i -= 1) {
    block[i] = 0x30 + (v % 8)
    v = Math.floor(v / 8)
  }
  block[offset + width - 1] = 0
}
