#!/usr/bin/env node
/**
 * The krunbox command line. Pipe-friendly: data on stdout, diagnostics on stderr, the child's
 * exit code as ours (124 on timeout), and `krunbox: S-code: message` with exit 125 on krunbox errors.
 */
import { SandboxError } from '../errors.js'
import { hostWriteError } from '../host-write-error.js'
import { KEEPER_VERB, keepNetwork } from '../network/keeper.js'
import { split, type Verb, type VerbArgs } from './args.js'
import { EXIT_ERROR, signalExitCode } from './interactive.js'
import { USAGE, usageOf } from './usage.js'
import { version } from './version.js'
import { create } from './verbs/create.js'
import { doctor } from './verbs/doctor.js'
import { download } from './verbs/download.js'
import { exec } from './verbs/exec.js'
import { images } from './verbs/images.js'
import { list } from './verbs/list.js'
import { logs } from './verbs/logs.js'
import { portForward } from './verbs/port-forward.js'
import { run } from './verbs/run.js'
import { status } from './verbs/status.js'
import { stop } from './verbs/stop.js'
import { upload } from './verbs/upload.js'
import { errors } from '../protocol/errors.gen.js'

/** Every verb, one file each under lib/cli/verbs/. */
const VERBS: Record<string, Verb> = {
  run,
  create,
  exec,
  logs,
  list,
  status,
  stop,
  'port-forward': portForward,
  upload,
  download,
  images,
  doctor,
}

async function main(argv: string[]): Promise<number> {
  const [verb, ...rest] = argv
  const [head, command] = split(rest)
  if (verb === '--version' || verb === '-V' || verb === 'version') {
    process.stdout.write(`krunbox ${version()}\n`)
    return 0
  }
  // Not a command for users: the process that holds a detached sandbox's network (network/keeper.ts).
  if (verb === KEEPER_VERB) {
    await keepNetwork(rest[0])
    return 0
  }
  if (head.includes('--help') || head.includes('-h')) {
    process.stdout.write(usageOf(verb) + '\n')
    return 0
  }
  try {
    return await runVerb(verb, rest, { head, command })
  } catch (err) {
    throw unknownOptionError(err, verb) ?? err
  }
}

async function runVerb(verb: string | undefined, rest: string[], args: VerbArgs): Promise<number> {
  const handler = verb === undefined || !Object.hasOwn(VERBS, verb) ? undefined : VERBS[verb]
  if (handler) return handler(args)
  switch (verb) {
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      ;(verb === undefined ? process.stderr : process.stdout).write(
        (verb === 'help' && rest[0] ? usageOf(rest[0]) : USAGE) + '\n',
      )
      return verb === undefined ? 2 : 0
    default:
      throw errors.badArgument({ subject: `command ${JSON.stringify(verb)}`, problem: 'is unknown (see krunbox help)' })
  }
}

/**
 * parseArgs's own text for an option a verb does not take advises putting it after `--`, which
 * for run and exec starts the sandbox's command with it: S001 naming the option and the verb.
 */
function unknownOptionError(err: unknown, verb: string | undefined): SandboxError | null {
  if ((err as { code?: unknown })?.code !== 'ERR_PARSE_ARGS_UNKNOWN_OPTION') return null
  const option = /'([^']+)'/.exec((err as Error).message)?.[1] ?? 'an option'
  return errors.badArgument({
    subject: `option ${option}`,
    problem: `is not one krunbox ${verb} takes (see krunbox ${verb} --help)`,
  })
}

/** Library warnings (driver choice, unenforced limits) would mix into the command's stderr; only a terminal sees them. */
function quietWarnings(): void {
  process.removeAllListeners('warning')
  process.on('warning', (w) => {
    if (process.stderr.isTTY)
      process.stderr.write(`${w.message.startsWith('krunbox:') ? '' : 'krunbox: warning: '}${w.message}\n`)
  })
}

function errorText(err: unknown): string {
  if (err instanceof SandboxError) return err.message
  // The CLI's own files (config, a download's destination) on a full or read-only filesystem: S313 naming the path.
  const written =
    typeof (err as NodeJS.ErrnoException)?.path === 'string'
      ? hostWriteError(err, (err as NodeJS.ErrnoException).path!)
      : null
  if (written) return written.message
  const code = err instanceof Error && 'code' in err ? String((err as { code: unknown }).code) : ''
  if (code.startsWith('ERR_PARSE_ARGS')) return `S001: ${(err as Error).message} (see krunbox help)`
  return `S500: ${err instanceof Error ? err.stack : String(err)}`
}

/** Exits once stdout and stderr are flushed: open handles (stdin, agent sockets) must not keep us alive. */
function exit(code: number): void {
  process.stdout.write('', () => process.stderr.write('', () => process.exit(code)))
}

quietWarnings()
// A reader that went away (`krunbox download ... - | head`) ends us like SIGPIPE would.
process.stdout.on('error', (err: NodeJS.ErrnoException) =>
  process.exit(err.code === 'EPIPE' ? signalExitCode('SIGPIPE') : EXIT_ERROR),
)
main(process.argv.slice(2)).then(exit, (err: unknown) => {
  process.stderr.write(`krunbox: ${errorText(err)}\n`)
  exit(EXIT_ERROR)
})
