/**
 * `krunbox port-forward <id> <port>[:hostPort]`: listens on 127.0.0.1:hostPort (a free port
 * unless given) and carries every connection to the port on the sandbox's loopback, until
 * Ctrl-C (exit 0) or until the sandbox ends (S004, exit 125). The first line on stdout is the
 * address listened on, for scripts.
 */
import { parseArgs } from 'node:util'
import { getDefaultRuntime } from '../../runtime.js'
import type { VerbArgs } from '../args.js'
import { loadToken } from '../tokens.js'
import { errors } from '../../protocol/errors.gen.js'

export const PORT_FORWARD_USAGE = `  port-forward <id> <port>[:hostPort]
      carries 127.0.0.1:hostPort (a free port unless given; printed first) to the sandbox's port until Ctrl-C`

const STOP_SIGNALS: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP']

function portsOf(spec: string): { port: number; hostPort: number } {
  const m = /^(\d{1,5})(?::(\d{1,5}))?$/.exec(spec)
  const port = Number(m?.[1])
  const hostPort = m?.[2] === undefined ? 0 : Number(m[2])
  if (!m || port < 1 || port > 65535 || hostPort > 65535) {
    throw errors.badArgument({
      subject: 'port-forward',
      problem: `expects <port>[:hostPort] with ports 1-65535, got ${JSON.stringify(spec)}`,
    })
  }
  return { port, hostPort }
}

export async function portForward({ head }: VerbArgs): Promise<number> {
  const { positionals } = parseArgs({ args: head, options: {}, allowPositionals: true, strict: true })
  const [id, spec, extra] = positionals
  if (!id || !spec)
    throw errors.badArgument({
      subject: '<id> or <port>',
      problem: 'is missing (usage: krunbox port-forward <id> <port>[:hostPort])',
    })
  if (extra !== undefined)
    throw errors.badArgument({ subject: `argument ${JSON.stringify(extra)}`, problem: 'is unexpected' })
  const { port, hostPort } = portsOf(spec)
  const sb = await getDefaultRuntime().attach(id, { accessToken: loadToken(id) })
  const forward = await sb.forward(port, { hostPort })
  forward.on('connectionError', (error) => process.stderr.write(`krunbox: ${error.message}\n`))
  process.stdout.write(`127.0.0.1:${forward.port}\n`)
  if (process.stderr.isTTY)
    process.stderr.write(`forwarding 127.0.0.1:${forward.port} to port ${port} of sandbox ${sb.id}; Ctrl-C stops\n`)
  const stoppedBy = await new Promise<NodeJS.Signals | null>((resolve) => {
    forward.once('close', () => resolve(null))
    for (const s of STOP_SIGNALS) process.once(s, () => resolve(s))
  })
  await forward.close()
  if (stoppedBy === null)
    throw errors.sandboxStopped({
      sandboxId: sb.id,
      state: `ended (${sb.destroyedReason ?? 'unknown'}); the forward is closed`,
    })
  return 0
}
