/** What every verb of the CLI shares: its arguments, their checks, and the flags several verbs take. */
import { parseArgs } from 'node:util'
import { parseDuration } from './durations.js'
import { errors } from '../protocol/errors.gen.js'

/** A verb's arguments: options and positionals before `--` (head), the sandbox's command after it. */
export interface VerbArgs {
  head: string[]
  command: string[]
}

/** One verb of the CLI (lib/cli/verbs/): its exit code. */
export type Verb = (args: VerbArgs) => Promise<number>

/** Splits argv at `--`: options and positionals before, the command after. */
export function split(argv: string[]): [string[], string[]] {
  const i = argv.indexOf('--')
  return i < 0 ? [argv, []] : [argv.slice(0, i), argv.slice(i + 1)]
}

export type OptionSpec = Record<string, { type: 'string' | 'boolean'; multiple?: boolean }>

/** What parse() gives a verb: its options' values, typed by the spec, and its positionals. */
export type Parsed<T extends OptionSpec> = ReturnType<
  typeof parseArgs<{ args: string[]; options: T; allowPositionals: true; strict: true }>
>

/** The verb's options and positionals (S001 for more positionals than it takes). */
export function parse<T extends OptionSpec>(args: string[], options: T, maxPositionals: number): Parsed<T> {
  const parsed = parseArgs({ args, options, allowPositionals: true, strict: true })
  if (parsed.positionals.length > maxPositionals) {
    throw errors.badArgument({
      subject: `argument ${JSON.stringify(parsed.positionals[maxPositionals])}`,
      problem: 'is unexpected (a command goes after --)',
    })
  }
  return parsed
}

export function envPairs(values: string[] | undefined): Record<string, string> {
  const env: Record<string, string> = {}
  for (const pair of values ?? []) {
    const eq = pair.indexOf('=')
    if (eq <= 0) throw errors.badArgument({ subject: '-e', problem: `expects K=V, got ${JSON.stringify(pair)}` })
    env[pair.slice(0, eq)] = pair.slice(eq + 1)
  }
  return env
}

export function int(text: string | undefined, flag: string): number | undefined {
  if (text === undefined) return undefined
  if (!/^\d+$/.test(text))
    throw errors.badArgument({ subject: `${flag}`, problem: `must be a whole number, got ${JSON.stringify(text)}` })
  return Number(text)
}

export function duration(text: string | undefined, flag: string): number | undefined {
  return text === undefined ? undefined : parseDuration(text, flag)
}

export function need(value: string | undefined, what: string): string {
  if (!value) throw errors.badArgument({ subject: what, problem: 'is missing (see krunbox help)' })
  return value
}

export function requireCommand(command: string[]): string[] {
  if (command.length === 0)
    throw errors.badArgument({
      subject: 'a command',
      problem:
        "must be given after -- (see krunbox help); run takes an OCI image's own Entrypoint and Cmd when it has them",
    })
  return command
}

/**
 * `--network` (any public destination) or `--allow HOST` (repeatable: only those; the runtime
 * validates each). On `create` the policy is enforced by a keeper process (network/keeper.ts).
 */
export function networkFromFlags(
  network: boolean | undefined,
  allow: string[] | undefined,
): boolean | { allow: string[] } {
  if (network && allow?.length)
    throw errors.badArgument({
      subject: '--network',
      problem: 'allows every public destination; give it or --allow HOST, not both',
    })
  return allow?.length ? { allow } : network === true
}

/** -e K=V and --env K=V, repeatable. */
export const ENV_FLAG = { env: { type: 'string', short: 'e', multiple: true } } as const
/** --user NAME|UID[:GID]: who commands run as (presets have `sandbox`, uid 1000). */
export const USER_FLAG = { user: { type: 'string', short: 'u' } } as const
/** -t: a terminal in the sandbox (the default when stdin and stdout are terminals); -i: stdin passed on even from a terminal. `-it` as Docker. */
export const TTY_FLAGS = { tty: { type: 'boolean', short: 't' }, interactive: { type: 'boolean', short: 'i' } } as const
