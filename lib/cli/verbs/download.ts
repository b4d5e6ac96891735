/**
 * `krunbox download <id> <remote> <local|->`: a sandbox file or directory onto the host (or stdout).
 */
import { attach } from '../attach.js'
import { write } from '../write.js'
import { parse, need, type VerbArgs } from '../args.js'

export async function download({ head }: VerbArgs): Promise<number> {
  const { positionals } = parse(head, {}, 3)
  const [id, remote, local] = [
    need(positionals[0], '<id>'),
    need(positionals[1], '<remote>'),
    need(positionals[2], '<local|->'),
  ]
  const sb = await attach(id)
  if (local !== '-') {
    await sb.fs.download(remote, local)
    return 0
  }
  const { stream } = await sb.fs.createReadStream(remote)
  for await (const piece of stream) await write(process.stdout, piece as Buffer)
  return 0
}
