/**
 * Runs one command in a sandbox with the CLI's own stdio: output streamed as it comes,
 * stdin piped in when it is not a terminal, termination signals forwarded to the command,
 * and the result turned into a shell exit code.
 */
import { spawnSync } from 'node:child_process'
import type { Readable } from 'node:stream'
import type { Command, CommandResult } from '../command.js'
import type { Sandbox } from '../sandbox.js'
import { errors } from '../protocol/errors.gen.js'

export const EXIT_ERROR = 125
export const EXIT_TIMEOUT = 124
const EXIT_NOT_RUNNABLE = 127

const SIGNAL_NUMBERS: Record<string, number> = {
  SIGHUP: 1,
  SIGINT: 2,
  SIGQUIT: 3,
  SIGILL: 4,
  SIGTRAP: 5,
  SIGABRT: 6,
  SIGBUS: 7,
  SIGFPE: 8,
  SIGKILL: 9,
  SIGUSR1: 10,
  SIGSEGV: 11,
  SIGUSR2: 12,
  SIGPIPE: 13,
  SIGALRM: 14,
  SIGTERM: 15,
  SIGXCPU: 24,
  SIGXFSZ: 25,
}
const FORWARDED: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP']

export function signalExitCode(signal: string | null): number {
  return 128 + (SIGNAL_NUMBERS[signal ?? ''] ?? 1)
}

/** Like a shell: the exit code, 128+n for a signal, 124 on timeout, 127 when it could not start. */
export function exitCodeOf(result: CommandResult): number {
  if (result.timedOut) return EXIT_TIMEOUT
  if (result.status === 'failed') return EXIT_NOT_RUNNABLE
  if (result.exitCode !== null) return result.exitCode
  return signalExitCode(result.signal ?? result.terminationSignal)
}

/**
 * The first Ctrl-C (or TERM/HUP) goes to the command; the same signal again stops waiting
 * for it (exit 128+n; `run`'s own sandbox then dies with the CLI).
 */
function forwardSignals(cmd: Command, signals: NodeJS.Signals[] = FORWARDED): () => void {
  const received = new Set<string>()
  const onSignal = (signal: NodeJS.Signals) => {
    if (received.has(signal)) process.exit(signalExitCode(signal))
    received.add(signal)
    void cmd.kill(signal).catch(() => {})
  }
  for (const s of signals) process.on(s, onSignal)
  return () => {
    for (const s of signals) process.removeListener(s, onSignal)
  }
}

export async function runInteractive(
  sb: Sandbox,
  argv: string[],
  options: { timeoutMs?: number; env: Record<string, string>; user?: string; tty?: boolean; interactive?: boolean },
): Promise<number> {
  if (argv.length === 0) throw errors.badArgument({ subject: 'a command', problem: 'must be given after --' })
  // A person at a terminal gets one in the sandbox (as `docker run -it`); -t asks for it anyway.
  if (options.tty || (process.stdin.isTTY && process.stdout.isTTY)) return runInTerminal(sb, argv, options)
  // A terminal is not a data source: only piped or redirected stdin is passed on, unless -i asks
  // for what is typed (line by line, as the host terminal delivers it).
  const stdin = process.stdin.isTTY && !options.interactive ? undefined : (process.stdin as Readable)
  if (!stdin) noticeTerminalNotRead()
  const cmd = sb.start(argv[0], argv.slice(1), {
    timeoutMs: options.timeoutMs,
    env: options.env,
    user: options.user,
    stdin,
  })
  cmd.on('stdout', (d) => process.stdout.write(d))
  cmd.on('stderr', (d) => process.stderr.write(d))
  const stopForwarding = forwardSignals(cmd)
  try {
    const result = await cmd.wait()
    if (result.status === 'failed') process.stderr.write(`krunbox: cannot run ${argv[0]}: ${result.failReason}\n`)
    return exitCodeOf(result)
  } finally {
    stopForwarding()
  }
}

/**
 * A person typing at a terminal that is not read would see the command end on an empty input
 * and no word why: one line on stderr says how to pass it on.
 */
function noticeTerminalNotRead(): void {
  process.stderr.write(
    'krunbox: stdin is a terminal and is not passed to the command; add -i to type into it (-it for a terminal in the sandbox)\n',
  )
}

/**
 * The command on a terminal in the sandbox, wired to the CLI's own: the host terminal in raw
 * mode (every key, Ctrl-C included, goes to the sandbox's terminal, whose line discipline
 * decides what it means), its window size followed, and its mode restored on every way out
 * (the result, an error, a second TERM/HUP that exits at once). Only the sandbox's output is
 * written to the host terminal; the sandbox holds no descriptor of it (docs/api.md "Terminal").
 */
async function runInTerminal(
  sb: Sandbox,
  argv: string[],
  options: { timeoutMs?: number; env: Record<string, string>; user?: string },
): Promise<number> {
  const { stdin, stdout } = process
  const size = () => ({ cols: stdout.columns || 80, rows: stdout.rows || 24 })
  const env = process.env.TERM ? { TERM: process.env.TERM, ...options.env } : options.env
  const term = sb.pty(argv[0], argv.slice(1), { ...size(), env, timeoutMs: options.timeoutMs, user: options.user })
  term.on('data', (d) => stdout.write(d))
  const wasRaw = stdin.isTTY ? stdin.isRaw : false
  const restore = () => {
    if (stdin.isTTY) stdin.setRawMode(wasRaw)
  }
  process.on('exit', restore)
  if (stdin.isTTY) {
    stdin.setRawMode(true)
    rawOutput()
  }
  const onInput = (d: Buffer) => term.write(d)
  stdin.on('data', onInput)
  const onResize = () => void term.resize(size().cols, size().rows).catch(() => {})
  stdout.on('resize', onResize)
  const stopForwarding = forwardSignals(term.command)
  try {
    const result = await term.wait()
    if (result.status === 'failed') process.stderr.write(`krunbox: cannot run ${argv[0]}: ${result.failReason}\n`)
    return exitCodeOf(result)
  } finally {
    stopForwarding()
    stdout.off('resize', onResize)
    stdin.off('data', onInput)
    stdin.pause()
    restore()
    process.off('exit', restore)
  }
}

/**
 * Node's raw mode (libuv's) leaves output post-processing on, so every "\n" the sandbox's
 * terminal sends would reach the screen as "\r\n" and full-screen programs would lose their
 * column; a real terminal client turns it off (cfmakeraw). setRawMode(false) restores the mode
 * libuv saved before, this included. Without stty the output merely gets extra carriage returns.
 */
function rawOutput(): void {
  spawnSync('stty', ['-opost'], { stdio: ['inherit', 'ignore', 'ignore'] })
}

/** Starts a command and returns its id once the agent has it; the command outlives the CLI. */
export async function startDetached(
  sb: Sandbox,
  argv: string[],
  options: { timeoutMs?: number; env: Record<string, string>; user?: string },
): Promise<string> {
  if (argv.length === 0) throw errors.badArgument({ subject: 'a command', problem: 'must be given after --' })
  const cmd = sb.start(argv[0], argv.slice(1), { timeoutMs: options.timeoutMs, env: options.env, user: options.user })
  await cmd.started()
  if (cmd.status === 'failed')
    throw errors.cannotStart({ program: argv[0], reason: cmd.snapshot?.failReason ?? 'failed to start' })
  return cmd.id
}

/** --json: runs the command to its end and prints one JSON document (result, stdout, stderr) instead of streaming. */
export async function runAsJson(
  sb: Sandbox,
  argv: string[],
  options: { timeoutMs?: number; env: Record<string, string>; user?: string; interactive?: boolean },
): Promise<number> {
  if (argv.length === 0) throw errors.badArgument({ subject: 'a command', problem: 'must be given after --' })
  const stdin = process.stdin.isTTY && !options.interactive ? undefined : (process.stdin as Readable)
  if (!stdin) noticeTerminalNotRead()
  const cmd = sb.start(argv[0], argv.slice(1), {
    timeoutMs: options.timeoutMs,
    env: options.env,
    user: options.user,
    stdin,
  })
  const out: Record<'stdout' | 'stderr', Buffer[]> = { stdout: [], stderr: [] }
  cmd.on('stdout', (d) => out.stdout.push(d))
  cmd.on('stderr', (d) => out.stderr.push(d))
  const stopForwarding = forwardSignals(cmd)
  try {
    const result = await cmd.wait()
    const doc = {
      sandboxId: sb.id,
      commandId: cmd.id,
      ...result,
      stdout: Buffer.concat(out.stdout).toString('utf8'),
      stderr: Buffer.concat(out.stderr).toString('utf8'),
    }
    process.stdout.write(JSON.stringify(doc) + '\n')
    return exitCodeOf(result)
  } finally {
    stopForwarding()
  }
}
