/**
 * `krunbox list [--all]`: live sandboxes (and with --all recently ended ones), a table or --json.
 */
import { getDefaultRuntime } from '../../runtime.js'
import { formatDuration } from '../durations.js'
import { parse, type VerbArgs } from '../args.js'

export async function list({ head }: VerbArgs): Promise<number> {
  const { values } = parse(head, { all: { type: 'boolean' }, json: { type: 'boolean' } }, 0)
  const rows = getDefaultRuntime().list({ includeHistorical: values.all ?? false })
  if (values.json) {
    process.stdout.write(JSON.stringify(rows) + '\n')
    return 0
  }
  process.stdout.write(['ID', 'NAME', 'IMAGE', 'STATUS', 'AGE', 'EXPIRES'].join('\t') + '\n')
  for (const r of rows) {
    const status = r.destroyedReason ? `${r.status}(${r.destroyedReason})` : r.execInProgress ? 'running' : r.status
    process.stdout.write(
      [
        r.id,
        r.name ?? '-',
        r.image,
        status,
        formatDuration(r.ageMs),
        r.expiresAt ? new Date(r.expiresAt).toISOString() : '-',
      ].join('\t') + '\n',
    )
  }
  return 0
}
