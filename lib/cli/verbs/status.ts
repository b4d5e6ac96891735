/**
 * `krunbox status <id>`: one sandbox, live or recently ended: status, image, age, expiry, metadata.
 */
import { getDefaultRuntime } from '../../runtime.js'
import type { SandboxListing } from '../../runtime.js'
import { formatDuration } from '../durations.js'
import { parse, need, type VerbArgs } from '../args.js'
import { errors } from '../../protocol/errors.gen.js'

export async function status({ head }: VerbArgs): Promise<number> {
  const { values, positionals } = parse(head, { json: { type: 'boolean' } }, 1)
  const id = need(positionals[0], '<id>')
  const row = getDefaultRuntime()
    .list({ includeHistorical: true })
    .find((r) => r.id === id)
  if (!row) throw errors.noSandbox({ sandboxId: JSON.stringify(id), where: 'live or recently ended' })
  process.stdout.write(values.json ? JSON.stringify(row) + '\n' : statusText(row))
  return 0
}

function statusText(r: SandboxListing): string {
  const lines = [
    ['id', r.id],
    ['name', r.name ?? '-'],
    ['image', r.image],
    ['status', r.destroyedReason ? `${r.status} (${r.destroyedReason})` : r.status],
    ['age', formatDuration(r.ageMs)],
    ['expires', r.expiresAt ? new Date(r.expiresAt).toISOString() : '-'],
    ...(r.network === undefined ? [] : [['network', r.network === null ? 'loopback only' : JSON.stringify(r.network)]]),
    ...Object.entries(r.metadata).map(([k, v]) => [`metadata.${k}`, v]),
  ]
  return lines.map(([k, v]) => `${k}\t${v}\n`).join('')
}
