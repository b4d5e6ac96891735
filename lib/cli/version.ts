/** The package's version, read from the package.json above this file (lib/cli/ in a checkout, dist/ once built). */
import fs from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

export function version(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url))
  for (;;) {
    try {
      const pkg = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')) as {
        name?: string
        version?: string
      }
      if (pkg.name === 'krunbox' && typeof pkg.version === 'string') return pkg.version
    } catch {}
    const up = path.dirname(dir)
    if (up === dir) return 'unknown'
    dir = up
  }
}
