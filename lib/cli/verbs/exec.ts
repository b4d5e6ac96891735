/**
 * `krunbox exec <id> -- <cmd>`: runs a command in a created sandbox and streams its output; with
 * --detach prints its command id and returns.
 */
import { runAsJson, runInteractive, startDetached } from '../interactive.js'
import { attach } from '../attach.js'
import {
  parse,
  need,
  duration,
  envPairs,
  requireCommand,
  ENV_FLAG,
  USER_FLAG,
  TTY_FLAGS,
  type VerbArgs,
} from '../args.js'

export async function exec({ head, command }: VerbArgs): Promise<number> {
  const { values, positionals } = parse(
    head,
    {
      timeout: { type: 'string' },
      ...ENV_FLAG,
      ...USER_FLAG,
      ...TTY_FLAGS,
      detach: { type: 'boolean' },
      json: { type: 'boolean' },
    },
    1,
  )
  const id = need(positionals[0], '<id>')
  const options = {
    timeoutMs: duration(values.timeout, '--timeout'),
    env: envPairs(values.env),
    user: values.user,
    tty: values.tty,
    interactive: values.interactive,
  }
  const argv = requireCommand(command)
  const sb = await attach(id)
  if (values.detach) {
    const commandId = await startDetached(sb, argv, options)
    process.stdout.write(values.json ? JSON.stringify({ sandboxId: sb.id, commandId }) + '\n' : `${commandId}\n`)
    return 0
  }
  return (values.json ? runAsJson : runInteractive)(sb, argv, options)
}
