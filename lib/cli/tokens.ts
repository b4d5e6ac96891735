/**
 * The CLI's credential store: access tokens of sandboxes created by `krunbox create`, one
 * 0600 file per sandbox under the user's config directory, so a later `exec` can attach.
 * The state directory itself only ever holds the token's hash.
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { hostWriteSync } from '../host-write-error.js'

function dir(): string {
  return path.join(process.env.XDG_CONFIG_HOME || path.join(os.homedir(), '.config'), 'krunbox', 'tokens')
}

/** A filesystem's refusal (full, read-only...) is S313 naming the token's file. */
export function saveToken(id: string, token: string): void {
  const file = path.join(dir(), id)
  hostWriteSync(file, () => {
    fs.mkdirSync(dir(), { recursive: true, mode: 0o700 })
    fs.writeFileSync(file, token, { mode: 0o600 })
  })
}

export function loadToken(id: string): string | undefined {
  if (process.env.KRUNBOX_TOKEN) return process.env.KRUNBOX_TOKEN
  try {
    return fs.readFileSync(path.join(dir(), path.basename(id)), 'utf8').trim()
  } catch {
    return undefined
  }
}

export function forgetToken(id: string): void {
  fs.rmSync(path.join(dir(), path.basename(id)), { force: true })
}
