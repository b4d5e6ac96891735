/**
 * `krunbox logs <id> <commandId>`: a command's output, all of it or (--follow) as it comes.
 */
import { attach } from '../attach.js'
import { write } from '../write.js'
import { parse, need, int, type VerbArgs } from '../args.js'
import { errors } from '../../protocol/errors.gen.js'

export async function logs({ head }: VerbArgs): Promise<number> {
  const { values, positionals } = parse(head, { follow: { type: 'boolean' }, 'after-seq': { type: 'string' } }, 2)
  const id = need(positionals[0], '<id>')
  const commandId = need(positionals[1], '<commandId>')
  let afterSeq = int(values['after-seq'], '--after-seq') ?? 0
  const sb = await attach(id)
  const cmd = await sb.command(commandId)
  if (!cmd) throw errors.noCommand({ commandId })
  const out = (stream: string) => (stream === 'stdout' ? process.stdout : process.stderr)
  if (values.follow) {
    for await (const chunk of cmd.logs({ afterSeq })) await write(out(chunk.stream), chunk.data)
    return 0
  }
  for (;;) {
    const page = await cmd.readLogs({ afterSeq, limit: 100 })
    for (const chunk of page.data) await write(out(chunk.stream), chunk.data)
    afterSeq = page.nextSeq
    if (!page.hasMore) return 0
  }
}
