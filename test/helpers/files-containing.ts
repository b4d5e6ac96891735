/** Test helper: which files of a tree hold some bytes (a planted marker, a tampered payload). */
import fs from 'node:fs/promises'
import path from 'node:path'

/** Files under `dir` whose bytes contain `needle`. */
export async function filesContaining(dir: string, needle: string): Promise<string[]> {
  const found: string[] = []
  for (const entry of await fs.readdir(dir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue
    const file = path.join(entry.parentPath, entry.name)
    if ((await fs.readFile(file)).includes(needle)) found.push(file)
  }
  return found
}
