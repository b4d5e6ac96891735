/**
 * `krunbox stop <id>`: stops a sandbox and forgets its token.
 */
import { SandboxError } from '../../errors.js'
import { getDefaultRuntime } from '../../runtime.js'
import type { Sandbox } from '../../sandbox.js'
import { forgetToken } from '../tokens.js'
import { attach } from '../attach.js'
import { parse, need, type VerbArgs } from '../args.js'
import { errors } from '../../protocol/errors.gen.js'

export async function stop({ head }: VerbArgs): Promise<number> {
  const { values, positionals } = parse(head, { json: { type: 'boolean' } }, 1)
  const id = need(positionals[0], '<id>')
  const result = await stopById(id)
  forgetToken(id)
  if (values.json) process.stdout.write(JSON.stringify(result) + '\n')
  return 0
}

/**
 * `krunbox stop <id>` as sb.stop() answers: a live sandbox is stopped ({ stopped: true }); one
 * that ended by itself (TTL, idle timeout, crash) is not an error ({ stopped: false }, with a
 * note); one already stopped is S004, as a second stop() on a handle; an id never seen is S002.
 */
async function stopById(id: string): Promise<{ sandboxId: string; stopped: boolean }> {
  let sb: Sandbox
  try {
    sb = await attach(id)
  } catch (err) {
    if (!(err instanceof SandboxError) || err.code !== 'S002') throw err
    const ended = getDefaultRuntime()
      .list({ includeHistorical: true })
      .find((r) => r.id === id && r.destroyedReason)
    if (!ended) throw err
    if (ended.destroyedReason === 'user_killed')
      throw errors.sandboxStopped({ sandboxId: id, state: 'is already stopped (user_killed)' })
    process.stderr.write(`krunbox: sandbox ${id} had already ended (${ended.destroyedReason})\n`)
    return { sandboxId: id, stopped: false }
  }
  return sb.stop()
}
