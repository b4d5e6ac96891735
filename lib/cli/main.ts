#!/usr/bin/env node
/**
 * The krunbox command line. Pipe-friendly: data on stdout, diagnostics on stderr, the child's
 * exit code as ours (124 on timeout), and `S-code: message` with exit 125 on krunbox errors.
 */
import { parseArgs } from 'node:util'
import { Readable } from 'node:stream'
import { SandboxError } from '../errors.js'
import { getDefaultRuntime } from '../runtime.js'
import type { Sandbox } from '../sandbox.js'
import { hostProbe } from '../probe.js'
import { formatDuration, parseDuration } from './durations.js'
import { forgetToken, loadToken, saveToken } from './tokens.js'
import { doctorReport } from './doctor.js'
import { ProgressPrinter } from './progress.js'

const EXIT_ERROR = 125
const EXIT_TIMEOUT = 124
const SIGNALS: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGKILL: 9, SIGTERM: 15, SIGSEGV: 11, SIGABRT: 6, SIGPIPE: 13 }

const USAGE = `usage: krunbox <command> [options]
  run <image> [--cpus N] [--memory MiB] [--timeout DUR] [-e K=V]... -- <cmd> [args...]
  create <image> [--idle-timeout DUR] [--ttl DUR] [--name L] [-e K=V]...
  exec <id> [--timeout DUR] [-e K=V]... -- <cmd> [args...]
  logs <id> <commandId> [--follow] [--after-seq N]
  list [--all]
  stop <id>
  upload <id> <local|-> <remote> [--mode OCTAL] [--parents]
  download <id> <remote> <local|->
  images [list|build <name>|rm <name>|prune]
  doctor`

/** Splits argv at `--`: options and positionals before, the command after. */
function split(argv: string[]): [string[], string[]] {
  const i = argv.indexOf('--')
  return i < 0 ? [argv, []] : [argv.slice(0, i), argv.slice(i + 1)]
}

function envPairs(values: string[] | undefined): Record<string, string> {
  const env: Record<string, string> = {}
  for (const pair of values ?? []) {
    const eq = pair.indexOf('=')
    if (eq <= 0) throw new SandboxError('S001', `-e expects K=V, got ${JSON.stringify(pair)}`)
    env[pair.slice(0, eq)] = pair.slice(eq + 1)
  }
  return env
}

function int(text: string | undefined, flag: string): number | undefined {
  if (text === undefined) return undefined
  if (!/^\d+$/.test(text)) throw new SandboxError('S001', `${flag} must be a whole number, got ${JSON.stringify(text)}`)
  return Number(text)
}

function need(value: string | undefined, what: string): string {
  if (!value) throw new SandboxError('S001', `missing ${what}\n${USAGE}`)
  return value
}

async function attach(id: string): Promise<Sandbox> {
  return getDefaultRuntime().attach(id, { accessToken: loadToken(id) })
}

/** Runs a command with our stdio, returns the exit code we should exit with. */
async function runInteractive(sb: Sandbox, command: string[], timeoutMs: number | undefined, env: Record<string, string>): Promise<number> {
  if (command.length === 0) throw new SandboxError('S001', `no command given after --\n${USAGE}`)
  const stdin = process.stdin.isTTY ? undefined : (process.stdin as Readable)
  const cmd = sb.start(command[0], command.slice(1), { timeoutMs, env, stdin })
  cmd.on('stdout', (d) => process.stdout.write(d))
  cmd.on('stderr', (d) => process.stderr.write(d))
  const r = await cmd.wait()
  await new Promise((resolve) => process.stdout.write('', resolve))
  if (r.timedOut) return EXIT_TIMEOUT
  if (r.status === 'failed') {
    process.stderr.write(`krunbox: cannot run ${command[0]}: ${r.failReason}\n`)
    return 127
  }
  if (r.exitCode !== null) return r.exitCode
  return 128 + (SIGNALS[r.signal ?? ''] ?? 1)
}

async function main(argv: string[]): Promise<number> {
  const [verb, ...rest] = argv
  const [head, command] = split(rest)
  switch (verb) {
    case 'run': {
      const { values, positionals } = parseArgs({ args: head, allowPositionals: true, options: { cpus: { type: 'string' }, memory: { type: 'string' }, timeout: { type: 'string' }, e: { type: 'string', multiple: true } } })
      const image = need(positionals[0], '<image>')
      const sb = await getDefaultRuntime().create({ image, cpus: int(values.cpus, '--cpus'), memoryMb: int(values.memory, '--memory') })
      try {
        return await runInteractive(sb, command, values.timeout ? parseDuration(values.timeout, '--timeout') : undefined, envPairs(values.e))
      } finally {
        await sb.stop()
      }
    }
    case 'create': {
      const { values, positionals } = parseArgs({ args: head, allowPositionals: true, options: { 'idle-timeout': { type: 'string' }, ttl: { type: 'string' }, name: { type: 'string' }, e: { type: 'string', multiple: true }, cpus: { type: 'string' }, memory: { type: 'string' } } })
      const image = need(positionals[0], '<image>')
      const started = Date.now()
      const sb = await getDefaultRuntime().create({
        image,
        detached: true,
        name: values.name,
        env: envPairs(values.e),
        cpus: int(values.cpus, '--cpus'),
        memoryMb: int(values.memory, '--memory'),
        idleTimeoutMs: values['idle-timeout'] ? parseDuration(values['idle-timeout'], '--idle-timeout') : undefined,
        ttlMs: values.ttl ? parseDuration(values.ttl, '--ttl') : undefined,
      })
      saveToken(sb.id, sb.accessToken!)
      process.stdout.write(`${sb.id}\n`)
      if (process.stderr.isTTY) process.stderr.write(`sandbox ${sb.id} ready (${sb.image}, ${sb.driver} driver) in ${Date.now() - started} ms\n`)
      return 0
    }
    case 'exec': {
      const { values, positionals } = parseArgs({ args: head, allowPositionals: true, options: { timeout: { type: 'string' }, e: { type: 'string', multiple: true } } })
      const sb = await attach(need(positionals[0], '<id>'))
      return runInteractive(sb, command, values.timeout ? parseDuration(values.timeout, '--timeout') : undefined, envPairs(values.e))
    }
    case 'logs': {
      const { values, positionals } = parseArgs({ args: head, allowPositionals: true, options: { follow: { type: 'boolean' }, 'after-seq': { type: 'string' } } })
      const sb = await attach(need(positionals[0], '<id>'))
      const commandId = need(positionals[1], '<commandId>')
      const cmd = await sb.command(commandId)
      if (!cmd) throw new SandboxError('S008', `sandbox ${sb.id} has no command ${commandId}`)
      let afterSeq = int(values['after-seq'], '--after-seq') ?? 0
      if (values.follow) {
        for await (const chunk of cmd.logs({ afterSeq })) (chunk.stream === 'stdout' ? process.stdout : process.stderr).write(chunk.data)
      } else {
        for (;;) {
          const page = await cmd.readLogs({ afterSeq, limit: 100 })
          for (const chunk of page.data) (chunk.stream === 'stdout' ? process.stdout : process.stderr).write(chunk.data)
          afterSeq = page.nextSeq
          if (!page.hasMore) break
        }
      }
      return 0
    }
    case 'list': {
      const { values } = parseArgs({ args: head, options: { all: { type: 'boolean' } } })
      const rows = getDefaultRuntime().list({ includeHistorical: values.all ?? false })
      process.stdout.write(['ID', 'NAME', 'IMAGE', 'STATUS', 'AGE', 'EXPIRES'].join('\t') + '\n')
      for (const r of rows) {
        const status = r.destroyedReason ? `${r.status}(${r.destroyedReason})` : r.execInProgress ? 'running' : r.status
        process.stdout.write([r.id, r.name ?? '-', r.image, status, formatDuration(r.ageMs), r.expiresAt ? new Date(r.expiresAt).toISOString() : '-'].join('\t') + '\n')
      }
      return 0
    }
    case 'stop': {
      const id = need(head[0], '<id>')
      const sb = await attach(id)
      await sb.stop()
      forgetToken(id)
      return 0
    }
    case 'upload': {
      const { values, positionals } = parseArgs({ args: head, allowPositionals: true, options: { mode: { type: 'string' }, parents: { type: 'boolean' } } })
      const [id, local, remote] = [need(positionals[0], '<id>'), need(positionals[1], '<local|->'), need(positionals[2], '<remote>')]
      if (values.mode !== undefined && !/^[0-7]{3,4}$/.test(values.mode)) throw new SandboxError('S001', `--mode must be octal like 644, got ${JSON.stringify(values.mode)}`)
      const mode = values.mode === undefined ? undefined : parseInt(values.mode, 8)
      const sb = await attach(id)
      const opts = { mode, parents: values.parents ?? false }
      if (local === '-') await sb.fs.writeFile(remote, process.stdin as Readable, opts)
      else await sb.fs.upload(local, remote, opts)
      return 0
    }
    case 'download': {
      const [id, remote, local] = [need(head[0], '<id>'), need(head[1], '<remote>'), need(head[2], '<local|->')]
      const sb = await attach(id)
      if (local === '-') {
        const { stream } = await sb.fs.createReadStream(remote)
        for await (const piece of stream) if (!process.stdout.write(piece)) await new Promise((r) => process.stdout.once('drain', r))
      } else await sb.fs.download(remote, local)
      return 0
    }
    case 'images': {
      const [sub = 'list', name] = head
      const images = getDefaultRuntime().images
      if (sub === 'list') {
        process.stdout.write(['NAME', 'ID', 'SIZE', 'BUILT'].join('\t') + '\n')
        for (const i of await images.list()) process.stdout.write([i.name, i.id.slice(0, 12), `${(i.sizeBytes / 1048576).toFixed(1)}MiB`, new Date(i.builtAt).toISOString()].join('\t') + '\n')
      } else if (sub === 'build') {
        const progress = new ProgressPrinter(process.stderr)
        const img = await images.build(need(name, '<name>'), { onProgress: (p) => progress.update(p) })
        progress.done()
        process.stdout.write(`${img.id}\n`)
      } else if (sub === 'rm') await images.remove(need(name, '<name>'))
      else if (sub === 'prune') for (const id of await images.prune()) process.stdout.write(`${id}\n`)
      else throw new SandboxError('S001', `unknown images subcommand ${JSON.stringify(sub)}\n${USAGE}`)
      return 0
    }
    case 'doctor':
      process.stdout.write(doctorReport(hostProbe()))
      return 0
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      process.stdout.write(USAGE + '\n')
      return verb === undefined ? 2 : 0
    default:
      throw new SandboxError('S001', `unknown command ${JSON.stringify(verb)}\n${USAGE}`)
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code
  },
  (err: unknown) => {
    if (err instanceof SandboxError) process.stderr.write(`krunbox: ${err.message}\n`)
    else if (err instanceof Error && 'code' in err && String((err as { code: unknown }).code).startsWith('ERR_PARSE_ARGS')) process.stderr.write(`krunbox: S001: ${err.message}\n${USAGE}\n`)
    else process.stderr.write(`krunbox: S500: ${err instanceof Error ? err.stack : String(err)}\n`)
    process.exitCode = EXIT_ERROR
  },
)
