/** A created sandbox by its id, with the access token `krunbox create` kept (or KRUNBOX_TOKEN). */
import { getDefaultRuntime } from '../runtime.js'
import type { Sandbox } from '../sandbox.js'
import { loadToken } from './tokens.js'

export async function attach(id: string): Promise<Sandbox> {
  return getDefaultRuntime().attach(id, { accessToken: loadToken(id) })
}
