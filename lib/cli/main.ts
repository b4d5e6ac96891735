#!/usr/bin/env node
/**
 * The krunbox command line. Pipe-friendly: data on stdout, diagnostics on stderr, the child's
 * exit code as ours (124 on timeout), and `krunbox: S-code: message` with exit 125 on krunbox errors.
 */
import { parseArgs } from 'node:util'
import type { Readable } from 'node:stream'
import { SandboxError } from '../errors.js'
import { hostWriteError } from '../host-write-error.js'
import { getDefaultRuntime, runtimeState } from '../runtime.js'
import type { Sandbox } from '../sandbox.js'
import { hostProbe } from '../probe.js'
import { ImageStore, PRESETS, isPresetName } from '../images/index.js'
import { imageCommand } from '../images/oci/command.js'
import { formatDuration, parseDuration } from './durations.js'
import { forgetToken, loadToken, saveToken } from './tokens.js'
import { cacheReport, doctorReport, requirementsReport } from './doctor.js'
import { doctorBoot, formatBootCheck } from './doctor-boot.js'
import { ProgressPrinter } from './progress.js'
import { firstUseProgress } from './first-use-progress.js'
import { EXIT_ERROR, runAsJson, runInteractive, signalExitCode, startDetached } from './interactive.js'
import { PORT_FORWARD_USAGE, portForward } from './port-forward.js'
import { KEEPER_VERB, keepNetwork } from '../network/keeper.js'
import { version } from './version.js'
import type { SandboxListing } from '../runtime.js'
import { MESSAGES } from '../protocol/contract.gen.js'

const USAGE = `usage: krunbox <command> [options]
  run <image> [--cpus N] [--memory MiB] [--timeout DUR] [--network | --allow HOST...] [-e|--env K=V]... [--json] [-- <cmd> [args...]]
      create a sandbox, run the command in it, stop it; exits with the command's code
      (without a command: an OCI image's own Entrypoint and Cmd)
  create <image> [--idle-timeout DUR] [--ttl DUR] [--name L] [--cpus N] [--memory MiB] [--network | --allow HOST...] [-e|--env K=V]... [--json]
      prints the id of a sandbox that outlives this CLI (idle timeout 5m, TTL 1h unless given);
      --json adds its access token, which Sandbox.attach(id, { accessToken }) needs
  exec <id> [--timeout DUR] [-e|--env K=V]... [--detach] [--json] -- <cmd> [args...]
      streams the command's output; --detach prints its command id (for logs) and returns
  logs <id> <commandId> [--follow] [--after-seq N]
  list [--all] [--json]         --all adds ended sandboxes with the reason they ended
  status <id> [--json]          one sandbox: status, image, age, expiry, metadata
  stop <id> [--json]            also fine once it ended by itself; --json: {"sandboxId","stopped"}
${PORT_FORWARD_USAGE}
  upload <id> <local|-> <remote> [--mode OCTAL] [--parents]     - reads stdin
  download <id> <remote> <local|->                              - writes stdout
  images [ls | pull <ref> [--always] | import <path> <name> | build [--force] [name] | rm <name|ref> | prune]
                                <ref>: an OCI reference (ghcr.io/acme/app:1.2.3, python:3.12-slim, …@sha256:…)
  doctor [--boot]               what this host supports, and which driver is used; --boot boots
                                microVMs and checks them (PASS/FAIL lines, exit 1 on a FAIL)
Durations: a bare number is seconds (300 = 5m); or 500ms, 30s, 5m, 2h, 1d. Commands have no
deadline unless --timeout is given. --network reaches any public destination, --allow HOST
(repeatable: a name, *.suffix, IP or CIDR, optional :port) only those (docs/network.md); a
created sandbox's filter runs in a process of its own until it ends. -u|--user NAME|UID[:GID] runs commands as that user
(run, create, exec; presets have \`sandbox\`, uid 1000). --json prints one JSON document on stdout instead.
Piped stdin is passed to run/exec commands; with stdin and stdout terminals (or -t, -it) the
command runs on a terminal in the sandbox: raw keys, window size and Ctrl-C go to it. -V, --version print the version.
Exit codes: the command's own, 124 on --timeout, 127 if it cannot start, 128+n on signal n,
125 on krunbox errors (printed as "krunbox: Sxxx: message"). Access tokens of created
sandboxes are kept in \${XDG_CONFIG_HOME:-~/.config}/krunbox/tokens (or set KRUNBOX_TOKEN).`

/** Splits argv at `--`: options and positionals before, the command after. */
function split(argv: string[]): [string[], string[]] {
  const i = argv.indexOf('--')
  return i < 0 ? [argv, []] : [argv.slice(0, i), argv.slice(i + 1)]
}

type OptionSpec = Record<string, { type: 'string' | 'boolean'; multiple?: boolean }>

function parse<T extends OptionSpec>(args: string[], options: T, maxPositionals: number) {
  const parsed = parseArgs({ args, options, allowPositionals: true, strict: true })
  if (parsed.positionals.length > maxPositionals) {
    throw new SandboxError('S001', MESSAGES.badArgument({ subject: `argument ${JSON.stringify(parsed.positionals[maxPositionals])}`, problem: 'is unexpected (a command goes after --)' }))
  }
  return parsed
}

function envPairs(values: string[] | undefined): Record<string, string> {
  const env: Record<string, string> = {}
  for (const pair of values ?? []) {
    const eq = pair.indexOf('=')
    if (eq <= 0) throw new SandboxError('S001', MESSAGES.badArgument({ subject: '-e', problem: `expects K=V, got ${JSON.stringify(pair)}` }))
    env[pair.slice(0, eq)] = pair.slice(eq + 1)
  }
  return env
}

function int(text: string | undefined, flag: string): number | undefined {
  if (text === undefined) return undefined
  if (!/^\d+$/.test(text)) throw new SandboxError('S001', MESSAGES.badArgument({ subject: `${flag}`, problem: `must be a whole number, got ${JSON.stringify(text)}` }))
  return Number(text)
}

function duration(text: string | undefined, flag: string): number | undefined {
  return text === undefined ? undefined : parseDuration(text, flag)
}

function need(value: string | undefined, what: string): string {
  if (!value) throw new SandboxError('S001', MESSAGES.badArgument({ subject: what, problem: 'is missing (see krunbox help)' }))
  return value
}

function requireCommand(command: string[]): string[] {
  if (command.length === 0) throw new SandboxError('S001', MESSAGES.badArgument({ subject: 'a command', problem: 'must be given after -- (see krunbox help); run takes an OCI image\'s own Entrypoint and Cmd when it has them' }))
  return command
}

/**
 * `--network` (any public destination) or `--allow HOST` (repeatable: only those; the runtime
 * validates each). On `create` the policy is enforced by a keeper process (network/keeper.ts).
 */
function networkFromFlags(network: boolean | undefined, allow: string[] | undefined): boolean | { allow: string[] } {
  if (network && allow?.length) throw new SandboxError('S001', MESSAGES.badArgument({ subject: '--network', problem: 'allows every public destination; give it or --allow HOST, not both' }))
  return allow?.length ? { allow } : network === true
}

async function attach(id: string): Promise<Sandbox> {
  return getDefaultRuntime().attach(id, { accessToken: loadToken(id) })
}

async function write(out: NodeJS.WriteStream, data: Buffer | string): Promise<void> {
  if (!out.write(data)) await new Promise((resolve) => out.once('drain', resolve))
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
    return await runVerb(verb, rest, head, command)
  } catch (err) {
    throw unknownOptionError(err, verb) ?? err
  }
}

async function runVerb(verb: string | undefined, rest: string[], head: string[], command: string[]): Promise<number> {
  switch (verb) {
    case 'run': {
      const { values, positionals } = parse(head, { cpus: { type: 'string' }, memory: { type: 'string' }, timeout: { type: 'string' }, ...ENV_FLAG, ...USER_FLAG, ...TTY_FLAGS, network: { type: 'boolean' }, allow: { type: 'string', multiple: true }, json: { type: 'boolean' } }, 1)
      const image = need(positionals[0], '<image>')
      const cpus = int(values.cpus, '--cpus')
      const memoryMb = int(values.memory, '--memory')
      const timeoutMs = duration(values.timeout, '--timeout')
      const env = envPairs(values.env)
      // Without a command, an OCI image's own (Entrypoint + Cmd) runs, as with docker run; a preset has none.
      const given = command.length === 0 && !isPresetName(image) ? null : requireCommand(command)
      const progress = firstUseProgress(image, { json: values.json })
      const sb = await getDefaultRuntime()
        .create({ image, cpus, memoryMb, network: networkFromFlags(values.network, values.allow), user: values.user, onProgress: progress.onProgress })
        .finally(() => progress.done())
      try {
        const argv = given ?? requireCommand(imageCommand((await getDefaultRuntime().images.resolve(image, { policy: 'never' })).manifest) ?? [])
        return await (values.json ? runAsJson : runInteractive)(sb, argv, { timeoutMs, env, tty: values.tty, interactive: values.interactive })
      } finally {
        // The sandbox may have ended under the command (it can stop itself); nothing to stop then.
        if (sb.status !== 'destroyed') await sb.stop()
      }
    }
    case 'create': {
      const { values, positionals } = parse(head, { 'idle-timeout': { type: 'string' }, ttl: { type: 'string' }, name: { type: 'string' }, ...ENV_FLAG, cpus: { type: 'string' }, memory: { type: 'string' }, ...USER_FLAG, network: { type: 'boolean' }, allow: { type: 'string', multiple: true }, json: { type: 'boolean' } }, 1)
      const image = need(positionals[0], '<image>')
      const started = Date.now()
      // Interrupted while booting: the sandbox would outlive us with nobody holding its token.
      const interrupted = deferSignals()
      const progress = firstUseProgress(image, { json: values.json })
      const sb = await getDefaultRuntime().create({
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
      }).finally(() => progress.done())
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
      if (values.json) process.stdout.write(JSON.stringify({ id: sb.id, name: sb.name, image: sb.image, imageVersion: sb.imageVersion, driver: sb.driver, expiresAt: sb.expiresAt, idleTimeoutMs: sb.idleTimeoutMs, accessToken: sb.accessToken }) + '\n')
      else process.stdout.write(`${sb.id}\n`)
      if (process.stderr.isTTY) process.stderr.write(`sandbox ${sb.id} ready (${sb.image}, ${sb.driver} driver) in ${Date.now() - started} ms\n`)
      return 0
    }
    case 'exec': {
      const { values, positionals } = parse(head, { timeout: { type: 'string' }, ...ENV_FLAG, ...USER_FLAG, ...TTY_FLAGS, detach: { type: 'boolean' }, json: { type: 'boolean' } }, 1)
      const id = need(positionals[0], '<id>')
      const options = { timeoutMs: duration(values.timeout, '--timeout'), env: envPairs(values.env), user: values.user, tty: values.tty, interactive: values.interactive }
      const argv = requireCommand(command)
      const sb = await attach(id)
      if (values.detach) {
        const commandId = await startDetached(sb, argv, options)
        process.stdout.write(values.json ? JSON.stringify({ sandboxId: sb.id, commandId }) + '\n' : `${commandId}\n`)
        return 0
      }
      return (values.json ? runAsJson : runInteractive)(sb, argv, options)
    }
    case 'logs': {
      const { values, positionals } = parse(head, { follow: { type: 'boolean' }, 'after-seq': { type: 'string' } }, 2)
      const id = need(positionals[0], '<id>')
      const commandId = need(positionals[1], '<commandId>')
      let afterSeq = int(values['after-seq'], '--after-seq') ?? 0
      const sb = await attach(id)
      const cmd = await sb.command(commandId)
      if (!cmd) throw new SandboxError('S008', MESSAGES.noCommand({ commandId }))
      const out = (stream: string) => (stream === 'stdout' ? process.stdout : process.stderr)
      if (values.follow) {
        for await (const chunk of cmd.logs({ afterSeq })) await write(out(chunk.stream), chunk.data)
        return 0
      }
      for (;;) {
        const page = await cmd.readLogs({ afterSeq, limit: 100 })
        for (const chunk of page.data) await write(out(chunk.stream), chunk.data)
        afterSeq = page.nextSeq
        if (!page.hasMore) return 0
      }
    }
    case 'list': {
      const { values } = parse(head, { all: { type: 'boolean' }, json: { type: 'boolean' } }, 0)
      const rows = getDefaultRuntime().list({ includeHistorical: values.all ?? false })
      if (values.json) {
        process.stdout.write(JSON.stringify(rows) + '\n')
        return 0
      }
      process.stdout.write(['ID', 'NAME', 'IMAGE', 'STATUS', 'AGE', 'EXPIRES'].join('\t') + '\n')
      for (const r of rows) {
        const status = r.destroyedReason ? `${r.status}(${r.destroyedReason})` : r.execInProgress ? 'running' : r.status
        process.stdout.write([r.id, r.name ?? '-', r.image, status, formatDuration(r.ageMs), r.expiresAt ? new Date(r.expiresAt).toISOString() : '-'].join('\t') + '\n')
      }
      return 0
    }
    case 'status': {
      const { values, positionals } = parse(head, { json: { type: 'boolean' } }, 1)
      const id = need(positionals[0], '<id>')
      const row = getDefaultRuntime().list({ includeHistorical: true }).find((r) => r.id === id)
      if (!row) throw new SandboxError('S002', MESSAGES.noSandbox({ sandboxId: JSON.stringify(id), where: 'live or recently ended' }))
      process.stdout.write(values.json ? JSON.stringify(row) + '\n' : statusText(row))
      return 0
    }
    case 'stop': {
      const { values, positionals } = parse(head, { json: { type: 'boolean' } }, 1)
      const id = need(positionals[0], '<id>')
      const result = await stopById(id)
      forgetToken(id)
      if (values.json) process.stdout.write(JSON.stringify(result) + '\n')
      return 0
    }
    case 'upload': {
      const { values, positionals } = parse(head, { mode: { type: 'string' }, parents: { type: 'boolean' } }, 3)
      const [id, local, remote] = [need(positionals[0], '<id>'), need(positionals[1], '<local|->'), need(positionals[2], '<remote>')]
      if (values.mode !== undefined && !/^[0-7]{3,4}$/.test(values.mode)) throw new SandboxError('S001', MESSAGES.badArgument({ subject: '--mode', problem: `must be octal like 644, got ${JSON.stringify(values.mode)}` }))
      const opts = { mode: values.mode === undefined ? undefined : parseInt(values.mode, 8), parents: values.parents ?? false }
      const sb = await attach(id)
      if (local === '-') await sb.fs.writeFile(remote, process.stdin as Readable, opts)
      else await sb.fs.upload(local, remote, opts)
      return 0
    }
    case 'download': {
      const { positionals } = parse(head, {}, 3)
      const [id, remote, local] = [need(positionals[0], '<id>'), need(positionals[1], '<remote>'), need(positionals[2], '<local|->')]
      const sb = await attach(id)
      if (local !== '-') {
        await sb.fs.download(remote, local)
        return 0
      }
      const { stream } = await sb.fs.createReadStream(remote)
      for await (const piece of stream) await write(process.stdout, piece as Buffer)
      return 0
    }
    case 'port-forward':
      return portForward(head)
    case 'images':
      return images(head)
    case 'doctor': {
      const doctorOptions = parse(head, { boot: { type: 'boolean' } }, 0).values
      try {
        process.stdout.write(doctorReport(hostProbe()))
      } catch (err) {
        // Without the addon the probe cannot run; what the host lacks still can be told.
        process.stdout.write(`host probe:              unavailable: ${(err as Error).message}\n`)
      }
      process.stdout.write(requirementsReport())
      {
        const store = new ImageStore()
        process.stdout.write(cacheReport(store.cacheDir, await store.list(), Object.keys(PRESETS)))
      }
      if (!doctorOptions.boot) return 0
      return (await doctorBoot(getDefaultRuntime(), (c) => process.stdout.write(formatBootCheck(c)))) ? 0 : 1
    }
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      ;(verb === undefined ? process.stderr : process.stdout).write((verb === 'help' && rest[0] ? usageOf(rest[0]) : USAGE) + '\n')
      return verb === undefined ? 2 : 0
    default:
      throw new SandboxError('S001', MESSAGES.badArgument({ subject: `command ${JSON.stringify(verb)}`, problem: 'is unknown (see krunbox help)' }))
  }
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
    const ended = getDefaultRuntime().list({ includeHistorical: true }).find((r) => r.id === id && r.destroyedReason)
    if (!ended) throw err
    if (ended.destroyedReason === 'user_killed') throw new SandboxError('S004', MESSAGES.sandboxStopped({ sandboxId: id, state: 'is already stopped (user_killed)' }))
    process.stderr.write(`krunbox: sandbox ${id} had already ended (${ended.destroyedReason})\n`)
    return { sandboxId: id, stopped: false }
  }
  return sb.stop()
}

/** The usage lines of one verb (its line and the indented ones under it), else the whole usage. */
function usageOf(verb: string | undefined): string {
  const lines = USAGE.split('\n')
  const start = lines.findIndex((l) => verb !== undefined && (l.startsWith(`  ${verb} `) || l === `  ${verb}`))
  if (start < 0) return USAGE
  let end = start + 1
  while (end < lines.length && /^ {4,}/.test(lines[end])) end++
  return [`usage: krunbox ${lines[start].trim()}`, ...lines.slice(start + 1, end), 'krunbox help: every command, durations, exit codes and tokens'].join('\n')
}

/**
 * parseArgs's own text for an option a verb does not take advises putting it after `--`, which
 * for run and exec starts the sandbox's command with it: S001 naming the option and the verb.
 */
function unknownOptionError(err: unknown, verb: string | undefined): SandboxError | null {
  if ((err as { code?: unknown })?.code !== 'ERR_PARSE_ARGS_UNKNOWN_OPTION') return null
  const option = /'([^']+)'/.exec((err as Error).message)?.[1] ?? 'an option'
  return new SandboxError('S001', MESSAGES.badArgument({ subject: `option ${option}`, problem: `is not one krunbox ${verb} takes (see krunbox ${verb} --help)` }))
}

/** -e K=V and --env K=V, repeatable. */
const ENV_FLAG = { env: { type: 'string', short: 'e', multiple: true } } as const
/** --user NAME|UID[:GID]: who commands run as (presets have `sandbox`, uid 1000). */
const USER_FLAG = { user: { type: 'string', short: 'u' } } as const
/** -t: a terminal in the sandbox (the default when stdin and stdout are terminals); -i: stdin passed on even from a terminal. `-it` as Docker. */
const TTY_FLAGS = { tty: { type: 'boolean', short: 't' }, interactive: { type: 'boolean', short: 'i' } } as const

function statusText(r: SandboxListing): string {
  const lines = [
    ['id', r.id],
    ['name', r.name ?? '-'],
    ['image', r.image],
    ['status', r.destroyedReason ? `${r.status} (${r.destroyedReason})` : r.status],
    ['age', formatDuration(r.ageMs)],
    ['expires', r.expiresAt ? new Date(r.expiresAt).toISOString() : '-'],
    ...(r.network === undefined ? [] : [['network', r.network === null ? 'loopback only' : JSON.stringify(r.network)]]),
    ...Object.entries(r.metadata).map(([k, v]) => [`metadata.${k}`, v]),
  ]
  return lines.map(([k, v]) => `${k}\t${v}\n`).join('')
}

async function images(args: string[]): Promise<number> {
  const [sub = 'list', ...rest] = args
  const runtime = getDefaultRuntime()
  const store = runtime.images
  switch (sub) {
    case 'ls':
    case 'list': {
      parse(rest, {}, 0)
      process.stdout.write(['NAME', 'ID', 'SIZE', 'BUILT'].join('\t') + '\n')
      for (const i of await store.list()) process.stdout.write([i.name, i.id.slice(0, 12), `${(i.sizeBytes / 1048576).toFixed(1)}MiB`, new Date(i.builtAt).toISOString()].join('\t') + '\n')
      return 0
    }
    case 'build': {
      // Without a name: every preset the cache holds (the others are built on first use).
      const { values, positionals } = parse(rest, { force: { type: 'boolean' } }, 1)
      const names = positionals.length > 0 ? positionals : (await store.list()).filter((i) => i.preset).map((i) => i.name)
      if (names.length === 0) process.stderr.write('krunbox: no preset is built yet; presets are built on first use or by images build <name>\n')
      for (const name of names) {
        const progress = new ProgressPrinter(process.stderr)
        const image = await store.build(name, { force: values.force === true, onProgress: (p) => progress.update(p) })
        progress.done()
        process.stdout.write(positionals.length > 0 ? `${image.id}\n` : `${name}\t${image.id}\t${image.built ? 'built' : 'current'}\n`)
      }
      return 0
    }
    case 'pull': {
      const { values, positionals } = parse(rest, { always: { type: 'boolean' } }, 1)
      const ref = need(positionals[0], '<ref>')
      const progress = new ProgressPrinter(process.stderr)
      const image = await store.pull(ref, { policy: values.always ? 'always' : 'if-missing', onProgress: (p) => progress.update(p) })
      progress.done()
      process.stdout.write(`${image.id}\n`)
      return 0
    }
    case 'import': {
      const { positionals } = parse(rest, {}, 2)
      const source = need(positionals[0], '<path>')
      const name = need(positionals[1], '<name>')
      const progress = new ProgressPrinter(process.stderr)
      const image = await store.import(source, { name, onProgress: (p) => progress.update(p) })
      progress.done()
      process.stdout.write(`${image.id}\n`)
      return 0
    }
    case 'rm': {
      const name = need(parse(rest, {}, 1).positionals[0], '<name>')
      if (!(await store.remove(name))) process.stderr.write(`krunbox: image ${name} was not built; nothing to remove\n`)
      return 0
    }
    case 'prune': {
      parse(rest, {}, 0)
      // Images of live sandboxes stay, even when their name now points to a newer build.
      const inUse = runtimeState(runtime).ids().map((id) => runtimeState(runtime).read(id)?.imageVersion ?? '')
      for (const id of await store.prune({ keep: inUse.filter(Boolean) })) process.stdout.write(`${id}\n`)
      return 0
    }
    default:
      throw new SandboxError('S001', MESSAGES.badArgument({ subject: `images subcommand ${JSON.stringify(sub)}`, problem: 'is unknown: use ls, pull, import, build, rm or prune' }))
  }
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

/** Library warnings (driver choice, unenforced limits) would mix into the command's stderr; only a terminal sees them. */
function quietWarnings(): void {
  process.removeAllListeners('warning')
  process.on('warning', (w) => {
    if (process.stderr.isTTY) process.stderr.write(`${w.message.startsWith('krunbox:') ? '' : 'krunbox: warning: '}${w.message}\n`)
  })
}

function errorText(err: unknown): string {
  if (err instanceof SandboxError) return err.message
  // The CLI's own files (config, a download's destination) on a full or read-only filesystem: S313 naming the path.
  const written = typeof (err as NodeJS.ErrnoException)?.path === 'string' ? hostWriteError(err, (err as NodeJS.ErrnoException).path!) : null
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
process.stdout.on('error', (err: NodeJS.ErrnoException) => process.exit(err.code === 'EPIPE' ? signalExitCode('SIGPIPE') : EXIT_ERROR))
main(process.argv.slice(2)).then(exit, (err: unknown) => {
  process.stderr.write(`krunbox: ${errorText(err)}\n`)
  exit(EXIT_ERROR)
})
