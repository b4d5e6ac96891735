/**
 * `krunbox upload <id> <local|-> <remote>`: a host file (or stdin) into the sandbox.
 */
import type { Readable } from 'node:stream'
import { attach } from '../attach.js'
import { parse, need, type VerbArgs } from '../args.js'
import { errors } from '../../protocol/errors.gen.js'

export async function upload({ head }: VerbArgs): Promise<number> {
  const { values, positionals } = parse(head, { mode: { type: 'string' }, parents: { type: 'boolean' } }, 3)
  const [id, local, remote] = [
    need(positionals[0], '<id>'),
    need(positionals[1], '<local|->'),
    need(positionals[2], '<remote>'),
  ]
  if (values.mode !== undefined && !/^[0-7]{3,4}$/.test(values.mode))
    throw errors.badArgument({
      subject: '--mode',
      problem: `must be octal like 644, got ${JSON.stringify(values.mode)}`,
    })
  const opts = {
    mode: values.mode === undefined ? undefined : parseInt(values.mode, 8),
    parents: values.parents ?? false,
  }
  const sb = await attach(id)
  if (local === '-') await sb.fs.writeFile(remote, process.stdin as Readable, opts)
  else await sb.fs.upload(local, remote, opts)
  return 0
}
