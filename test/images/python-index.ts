/**
 * A Python package index on the test's own loopback (PEP 503 "simple" pages) serving pure
 * Python wheels the test builds in memory, each a zip (stored, no compression) with the module and
 * its dist-info (METADATA, WHEEL, RECORD), as pip expects it. No public index is reachable here.
 */
import { createHash } from 'node:crypto'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import zlib from 'node:zlib'

/** A zip archive of `files` (name -> content), every entry stored as it is. */
export function storedZip(files: Record<string, string>): Buffer {
  const locals: Buffer[] = []
  const centrals: Buffer[] = []
  let offset = 0
  for (const [name, content] of Object.entries(files)) {
    const nameBytes = Buffer.from(name)
    const data = Buffer.from(content)
    const crc = zlib.crc32(data)
    const local = Buffer.alloc(30)
    local.writeUInt32LE(0x04034b50, 0)
    local.writeUInt16LE(20, 4) // version needed
    local.writeUInt32LE(crc, 14)
    local.writeUInt32LE(data.length, 18)
    local.writeUInt32LE(data.length, 22)
    local.writeUInt16LE(nameBytes.length, 26)
    const central = Buffer.alloc(46)
    central.writeUInt32LE(0x02014b50, 0)
    central.writeUInt16LE(20, 4) // version made by
    central.writeUInt16LE(20, 6) // version needed
    central.writeUInt32LE(crc, 16)
    central.writeUInt32LE(data.length, 20)
    central.writeUInt32LE(data.length, 24)
    central.writeUInt16LE(nameBytes.length, 28)
    central.writeUInt32LE((0o100644 << 16) >>> 0, 38) // external attributes: a regular file, 0644
    central.writeUInt32LE(offset, 42)
    locals.push(local, nameBytes, data)
    centrals.push(central, nameBytes)
    offset += local.length + nameBytes.length + data.length
  }
  const directory = Buffer.concat(centrals)
  const end = Buffer.alloc(22)
  end.writeUInt32LE(0x06054b50, 0)
  end.writeUInt16LE(centrals.length / 2, 8)
  end.writeUInt16LE(centrals.length / 2, 10)
  end.writeUInt32LE(directory.length, 12)
  end.writeUInt32LE(offset, 16)
  return Buffer.concat([...locals, directory, end])
}

/** RECORD's hash spelling: sha256 in URL-safe base64 without padding. */
function recordHash(content: string): string {
  return `sha256=${createHash('sha256').update(content).digest('base64url')}`
}

/** A wheel of one module `module` whose `VALUE` is `value`. */
export function pureWheel(distribution: string, version: string, module: string, value: string): Buffer {
  const info = `${module}-${version}.dist-info`
  const files: Record<string, string> = {
    [`${module}/__init__.py`]: `VALUE = ${JSON.stringify(value)}\n`,
    [`${info}/METADATA`]: `Metadata-Version: 2.1\nName: ${distribution}\nVersion: ${version}\n`,
    [`${info}/WHEEL`]: 'Wheel-Version: 1.0\nGenerator: krunbox-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n',
  }
  const record = Object.entries(files).map(([name, content]) => `${name},${recordHash(content)},${content.length}`)
  files[`${info}/RECORD`] = [...record, `${info}/RECORD,,`, ''].join('\n')
  return storedZip(files)
}

export interface PackageIndex {
  port: number
  /** Paths asked for, in order. */
  requests: string[]
  close(): Promise<void>
}

/** A project of the index: its wheel's file name and bytes. */
export interface IndexedWheel {
  file: string
  wheel: Buffer
}

/** Serves `/simple/<project>/` for each project, and the wheel each links to, on 127.0.0.1. */
export async function servePackageIndex(projects: Record<string, IndexedWheel>): Promise<PackageIndex> {
  const requests: string[] = []
  const pages = new Map<string, string>()
  const files = new Map<string, Buffer>()
  for (const [project, { file, wheel }] of Object.entries(projects)) {
    const sha256 = createHash('sha256').update(wheel).digest('hex')
    pages.set(
      `/simple/${project}/`,
      `<!DOCTYPE html><html><body><a href="/files/${file}#sha256=${sha256}">${file}</a></body></html>`,
    )
    files.set(`/files/${file}`, wheel)
  }
  const server = http.createServer((req, res) => {
    const url = req.url ?? ''
    requests.push(url)
    const page = pages.get(url)
    const file = files.get(url)
    if (page !== undefined) {
      res.writeHead(200, { 'content-type': 'text/html' })
      res.end(page)
    } else if (file !== undefined) {
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': file.length })
      res.end(file)
    } else {
      res.writeHead(404)
      res.end()
    }
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    port: (server.address() as AddressInfo).port,
    requests,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  }
}
