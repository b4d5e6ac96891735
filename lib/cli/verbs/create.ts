/**
 * `krunbox create <image>`: a sandbox that outlives this CLI; prints its id (with --json its
 * access token too), keeping the token for later commands.
 */
import { getDefaultRuntime } from '../../runtime.js'
import { saveToken } from '../tokens.js'
import { firstUseProgress } from '../first-use-progress.js'
import { signalExitCode } from '../interactive.js'
import { parse, need, int, duration, envPairs, networkFromFlags, ENV_FLAG, USER_FLAG, type VerbArgs } from '../args.js'

export async function create({ head }: VerbArgs): Promise<number> {
  const { values, positionals } = parse(
    head,
    {
      'idle-timeout': { type: 'string' },
      ttl: { type: 'string' },
      name: { type: 'string' },
      ...ENV_FLAG,
      cpus: { type: 'string' },
      memory: { type: 'string' },
      ...USER_FLAG,
      network: { type: 'boolean' },
      allow: { type: 'string', multiple: true },
      json: { type: 'boolean' },
    },
    1,
  )
  const image = need(positionals[0], '<image>')
  const started = Date.now()
  // Interrupted while booting: the sandbox would outlive us with nobody holding its token.
  const interrupted = deferSignals()
  const progress = firstUseProgress(image, { json: values.json })
  const sb = await getDefaultRuntime()
    .create({
      image,
      onProgress: progress.onProgress,
      detached: true,
      name: values.name,
      env: envPairs(values.env),
      cpus: int(values.cpus, '--cpus'),
      memoryMb: int(values.memory, '--memory'),
      network: networkFromFlags(values.network, values.allow),
      user: values.user,
      idleTimeoutMs: duration(values['idle-timeout'], '--idle-timeout'),
      ttlMs: duration(values.ttl, '--ttl'),
    })
    .finally(() => progress.done())
  if (interrupted.signal) {
    await sb.stop()
    return signalExitCode(interrupted.signal)
  }
  interrupted.restore()
  try {
    saveToken(sb.id, sb.accessToken!)
  } catch (err) {
    // Without its token no later command can attach: it must not live on, unreachable, until its ttl.
    await sb.stop().catch(() => {})
    throw err
  }
  if (values.json)
    process.stdout.write(
      JSON.stringify({
        id: sb.id,
        name: sb.name,
        image: sb.image,
        imageVersion: sb.imageVersion,
        driver: sb.driver,
        expiresAt: sb.expiresAt,
        idleTimeoutMs: sb.idleTimeoutMs,
        accessToken: sb.accessToken,
      }) + '\n',
    )
  else process.stdout.write(`${sb.id}\n`)
  if (process.stderr.isTTY)
    process.stderr.write(`sandbox ${sb.id} ready (${sb.image}, ${sb.driver} driver) in ${Date.now() - started} ms\n`)
  return 0
}

/** Notes SIGINT/SIGTERM/SIGHUP instead of dying at once, until restore(). */
function deferSignals(): { signal: NodeJS.Signals | null; restore(): void } {
  const state = {
    signal: null as NodeJS.Signals | null,
    restore: () => {
      for (const s of DEFERRED) process.removeListener(s, note)
    },
  }
  const note = (s: NodeJS.Signals) => (state.signal ??= s)
  for (const s of DEFERRED) process.on(s, note)
  return state
}
const DEFERRED: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP']
