/**
 * `krunbox run <image> [-- <cmd>]`: creates a sandbox, runs the command in it (without one, an
 * OCI image's own Entrypoint and Cmd), stops it; exits with the command's code.
 */
import { getDefaultRuntime } from '../../runtime.js'
import { isPresetName } from '../../images/index.js'
import { imageCommand } from '../../images/oci/command.js'
import { firstUseProgress } from '../first-use-progress.js'
import { runAsJson, runInteractive } from '../interactive.js'
import {
  parse,
  need,
  int,
  duration,
  envPairs,
  requireCommand,
  networkFromFlags,
  ENV_FLAG,
  USER_FLAG,
  TTY_FLAGS,
  type VerbArgs,
} from '../args.js'

export async function run({ head, command }: VerbArgs): Promise<number> {
  const { values, positionals } = parse(
    head,
    {
      cpus: { type: 'string' },
      memory: { type: 'string' },
      timeout: { type: 'string' },
      ...ENV_FLAG,
      ...USER_FLAG,
      ...TTY_FLAGS,
      network: { type: 'boolean' },
      allow: { type: 'string', multiple: true },
      json: { type: 'boolean' },
    },
    1,
  )
  const image = need(positionals[0], '<image>')
  const cpus = int(values.cpus, '--cpus')
  const memoryMb = int(values.memory, '--memory')
  const timeoutMs = duration(values.timeout, '--timeout')
  const env = envPairs(values.env)
  // Without a command, an OCI image's own (Entrypoint + Cmd) runs, as with docker run; a preset has none.
  const given = command.length === 0 && !isPresetName(image) ? null : requireCommand(command)
  const progress = firstUseProgress(image, { json: values.json })
  const sb = await getDefaultRuntime()
    .create({
      image,
      cpus,
      memoryMb,
      network: networkFromFlags(values.network, values.allow),
      user: values.user,
      onProgress: progress.onProgress,
    })
    .finally(() => progress.done())
  try {
    const argv =
      given ??
      requireCommand(
        imageCommand((await getDefaultRuntime().images.resolve(image, { policy: 'never' })).manifest) ?? [],
      )
    return await (values.json ? runAsJson : runInteractive)(sb, argv, {
      timeoutMs,
      env,
      tty: values.tty,
      interactive: values.interactive,
    })
  } finally {
    // The sandbox may have ended under the command (it can stop itself); nothing to stop then.
    if (sb.status !== 'destroyed') await sb.stop()
  }
}
