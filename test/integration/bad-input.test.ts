/**
 * A sweep of bad inputs across every public entry point — the Runtime, Sandbox,
 * its fs, Command, the images API and the CLI. Each must be answered by a SandboxError whose code
 * is documented in ERRORS.md and whose message names the offending option or value: nothing
 * accepted silently, nothing hanging (a per-case deadline), nothing thrown of another kind.
 * (Issue 21 item 9.)
 */
import fs from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { Readable } from 'node:stream'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Command } from '../../lib/command.js'
import { SandboxError } from '../../lib/errors.js'
import { ImageStore } from '../../lib/images/index.js'
import { Runtime } from '../../lib/runtime.js'
import { Sandbox } from '../../lib/sandbox.js'
import { testRuntime } from '../helpers/runtime.js'
import { CLI, ensureCliBuilt, krunbox, privateCliEnv, repoRoot } from '../cli/helpers.js'

const CASE_DEADLINE_MS = 15_000
const DOCUMENTED = new Set(
  fs
    .readFileSync(path.join(repoRoot, 'ERRORS.md'), 'utf8')
    .match(/`S\d{3}`/g)!
    .map((c) => c.slice(1, -1)),
)

let rt: Runtime
let sb: Sandbox
let cmd: Command
let scratch: string
let xdgState: string
const cli = privateCliEnv()

beforeAll(async () => {
  // Sandbox.create/attach use the default runtime: give it a private state directory.
  xdgState = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-badinput-xdg-'))
  process.env.XDG_STATE_HOME = xdgState
  scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-badinput-'))
  rt = testRuntime()
  sb = await rt.create({ image: 'base' })
  cmd = sb.start('sh', ['-c', 'echo hi; sleep 600'])
  await ensureCliBuilt()
})
afterAll(async () => {
  await rt.close()
  fs.rmSync(scratch, { recursive: true, force: true })
  fs.rmSync(cli.home, { recursive: true, force: true })
  fs.rmSync(xdgState, { recursive: true, force: true })
})

/** What a case must produce: a documented code, and every needle somewhere in the message. */
interface Case {
  label: string
  run: () => unknown
  needles: string[]
  codes?: string[]
}
const cases: Case[] = []

/** Short primitive values are quoted back in the message; long or odd strings need only the option name. */
function valueNeedle(value: unknown): string[] {
  if (typeof value === 'number') return [String(value)]
  if (typeof value === 'string' && value.length > 0 && value.length <= 24 && /^[\x21-\x7e]+$/.test(value))
    return [value]
  return []
}

function add(label: string, run: () => unknown, needles: string[] = [], codes?: string[]): void {
  cases.push({ label, run, needles, codes })
}

const HUGE = 'x'.repeat(5 * 1024 * 1024)
const LONE_SURROGATE = 'a\uD800b'
const BAD_NUMBERS: [string, unknown][] = [
  ['a string', '5'],
  ['negative', -1],
  ['NaN', NaN],
  ['Infinity', Infinity],
  ['-Infinity', -Infinity],
  ['a fraction', 1.5],
  ['huge', 1e15],
  ['null', null],
  ['an object', {}],
  ['a boolean', true],
]
const BAD_STRINGS: [string, unknown][] = [
  ['a number', 5],
  ['empty', ''],
  ['a NUL byte', 'a\0b'],
  ['a lone surrogate (not UTF-8)', LONE_SURROGATE],
  ['an object', {}],
  ['an array', ['x']],
]
const BAD_BOOLEANS: [string, unknown][] = [
  ['a string', 'yes'],
  ['a number', 1],
  ['null', null],
]
const BAD_OPTION_OBJECTS: [string, unknown][] = [
  ['a string', 'opts'],
  ['a number', 7],
  ['an array', []],
  ['an unknown key', { bogusOption: 1 }],
]

/** Every bad value of a kind for option `key` of `call(options)`. */
function options(
  entry: string,
  kind: [string, unknown][],
  key: string,
  call: (o: Record<string, unknown>) => unknown,
  base: Record<string, unknown> = {},
): void {
  for (const [what, value] of kind)
    add(`${entry}: ${key} ${what}`, () => call({ ...base, [key]: value }), [key, ...valueNeedle(value)])
}
function optionObjects(entry: string, call: (o: unknown) => unknown): void {
  for (const [what, value] of BAD_OPTION_OBJECTS)
    add(`${entry}: options ${what}`, () => call(value), what === 'an unknown key' ? ['bogusOption'] : [])
}

// ---- Runtime constructor ----
const ctor = (o: unknown) => new Runtime(o as never)
optionObjects('new Runtime', ctor)
for (const key of ['maxConcurrentSandboxes', 'defaultCpus', 'defaultMemoryMb', 'defaultIdleTimeoutMs', 'maxTtlMs'])
  options('new Runtime', BAD_NUMBERS, key, ctor)
options('new Runtime', BAD_BOOLEANS, 'queue', ctor)
for (const key of ['stateDir', 'cacheDir']) options('new Runtime', BAD_STRINGS, key, ctor)
add('new Runtime: stateDir in /proc', () => ctor({ stateDir: '/proc/krunbox-state' }), ['/proc/krunbox-state'])
add('new Runtime: imageAllowlist a string', () => ctor({ imageAllowlist: 'base' }), ['imageAllowlist'])
add('new Runtime: imageAllowlist with a number', () => ctor({ imageAllowlist: [5] }), ['imageAllowlist'])
add('new Runtime: imageAllowlist misspelt', () => ctor({ imageAllowlist: ['bsae'] }), ['bsae'])
add('new Runtime: imageAllowlist with a NUL byte', () => ctor({ imageAllowlist: ['ba\0se'] }), ['imageAllowlist'])
add('new Runtime: customImages a string', () => ctor({ customImages: '/tmp' }), ['customImages'])
add('new Runtime: customImages source a number', () => ctor({ customImages: { mine: 5 } }), ['mine'])
add('new Runtime: customImages source empty', () => ctor({ customImages: { mine: '' } }), ['mine'])
add('new Runtime: customImages name with traversal', () => ctor({ customImages: { '../x': '/tmp' } }), ['../x'])
add('new Runtime: customImages name shadowing a preset', () => ctor({ customImages: { base: '/tmp' } }), ['base'])
add('new Runtime: perImageCaps a number', () => ctor({ perImageCaps: 5 }), ['perImageCaps'])
add('new Runtime: perImageCaps entry a string', () => ctor({ perImageCaps: { base: 'x' } }), ['perImageCaps.base'])
add('new Runtime: perImageCaps maxCpus negative', () => ctor({ perImageCaps: { base: { maxCpus: -1 } } }), [
  'maxCpus',
  '-1',
])
add('new Runtime: perImageCaps unknown key', () => ctor({ perImageCaps: { base: { cpus: 1 } } }), ['cpus'])

// ---- rt.create ----
const create = (o: unknown) => rt.create(o as never)
optionObjects('create', create)
for (const key of ['cpus', 'memoryMb', 'pidsMax', 'diskMb', 'idleTimeoutMs', 'ttlMs', 'bootTimeoutMs'])
  options('create', BAD_NUMBERS, key, create)
for (const key of ['network', 'detached', 'wait']) options('create', BAD_BOOLEANS, key, create)
options('create', BAD_STRINGS, 'image', create)
add('create: image unknown', () => create({ image: 'no-such-image' }), ['no-such-image'])
add('create: image with traversal', () => create({ image: '../../etc' }), ['../../etc'])
add('create: driver unknown', () => create({ driver: 'kvm' }), ['kvm'])
for (const [what, value] of [
  ['with a space', 'my box'],
  ['too long', 'n'.repeat(100)],
  ['with traversal', '../x'],
  ['a number', 5],
  ['empty', ''],
  ['a lone surrogate', LONE_SURROGATE],
] as const) {
  add(`create: name ${what}`, () => create({ name: value }), ['name'])
}
for (const [what, value, needle] of [
  ['a string', 'A=1', 'env'],
  ['reserved prefix', { KRUNBOX_X: '1' }, 'KRUNBOX_X'],
  ['bad key', { '1A': 'x' }, '1A'],
  ['key with =', { 'A=B': 'x' }, 'A=B'],
  ['number value', { A: 5 }, 'A'],
  ['NUL in value', { A: 'a\0' }, 'A'],
  ['lone surrogate in value', { A: LONE_SURROGATE }, 'A'],
  // Linux passes no variable of 128 KiB or more to a program: refused at create, not at each exec.
  ['a 1 MiB value', { BIG: 'x'.repeat(1024 * 1024) }, 'BIG'],
  [
    '2 MiB in 20 values',
    Object.fromEntries(Array.from({ length: 20 }, (_, i) => [`V${i}`, 'x'.repeat(100_000)])),
    'env',
  ],
] as const) {
  add(`create: env ${what}`, () => create({ env: value }), [needle])
}
for (const [what, value, needle] of [
  ['a string', 'k=v', 'metadata'],
  ['number value', { k: 5 }, 'k'],
  ['too many keys', Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v'])), '17'],
  ['bad key characters', { 'k y': 'v' }, 'k y'],
  ['value too long', { k: 'v'.repeat(600) }, 'k'],
] as const) {
  add(`create: metadata ${what}`, () => create({ metadata: value }), [needle])
}

// ---- rt.attach, rt.list, Sandbox.create/attach ----
for (const [what, value] of [
  ['a number', 5],
  ['empty', ''],
  ['not a UUID', 'abc'],
  ['traversal', '../../../etc/passwd-------------------'],
  ['NUL byte', 'a\0'],
  ['huge', HUGE],
] as const) {
  add(`attach: id ${what}`, () => rt.attach(value as never, { accessToken: 'x' }), ['id'])
}
add('attach: unknown sandbox', () => rt.attach('00000000-0000-4000-8000-000000000000', { accessToken: 'x' }), [
  '00000000-0000-4000-8000-000000000000',
])
add('attach: wrong token', () => rt.attach(sb.id, { accessToken: 'wrong' }), ['accessToken'])
add('attach: token a number', () => rt.attach(sb.id, { accessToken: 5 as never }), ['accessToken'])
add('attach: options unknown key', () => rt.attach(sb.id, { token: 'x' } as never), ['token'])
add('attach: options a string', () => rt.attach(sb.id, 'x' as never), ['attach options'])
optionObjects('list', (o) => rt.list(o as never))
options('list', BAD_BOOLEANS, 'includeHistorical', (o) => rt.list(o as never))
optionObjects('Sandbox.create', (o) => Sandbox.create(o as never))
add('Sandbox.create: cpus NaN', () => Sandbox.create({ cpus: NaN }), ['cpus', 'NaN'])
add('Sandbox.attach: id not a UUID', () => Sandbox.attach('nope', { accessToken: 'x' }), ['nope'])
add(
  'Sandbox.attach: options missing',
  () => Sandbox.attach('00000000-0000-4000-8000-000000000000', undefined as never),
  ['00000000-0000-4000-8000-000000000000'],
)

// ---- sb.exec / sb.start ----
const exec = (o: unknown) => sb.exec('true', [], o as never)
const start = (o: unknown) => sb.start('true', [], o as never)
optionObjects('exec', exec)
optionObjects('start', start)
// A command's timeoutMs takes null as "no deadline" (Infinity is refused: it is no number of ms).
const BAD_TIMEOUTS = BAD_NUMBERS.filter(([, v]) => v !== null)
for (const key of ['killGraceMs', 'maxBuffer', 'retainBytes']) options('exec', BAD_NUMBERS, key, exec)
for (const key of ['killGraceMs', 'retainBytes']) options('start', BAD_NUMBERS, key, start)
options('exec', BAD_TIMEOUTS, 'timeoutMs', exec)
options('start', BAD_TIMEOUTS, 'timeoutMs', start)
options('exec', BAD_BOOLEANS, 'shell', exec)
options('start', BAD_STRINGS, 'idempotencyKey', start)
for (const [what, value] of [
  ['relative', 'tmp'],
  ['a number', 5],
  ['NUL byte', '/tmp\0'],
  ['lone surrogate', `/${LONE_SURROGATE}`],
] as const) {
  add(`exec: cwd ${what}`, () => exec({ cwd: value }), ['cwd'])
}
add('exec: encoding unknown', () => exec({ encoding: 'latin1' }), ['latin1'])
add('exec: stdin a number', () => exec({ stdin: 5 }), ['stdin'])
add('exec: stdin a stream (exec takes strings and Buffers)', () => exec({ stdin: Readable.from(['x']) }), ['stdin'])
add('exec: signal a string', () => exec({ signal: 'abort' }), ['signal'])
add('exec: env reserved prefix', () => exec({ env: { KRUNBOX_TOKEN: 'x' } }), ['KRUNBOX_TOKEN'])
add('start: stdin an object', () => start({ stdin: { data: 'x' } }), ['stdin'])
for (const [what, value] of [
  ['a number', 5],
  ['empty', ''],
  ['NUL byte', 'ec\0ho'],
  ['lone surrogate', LONE_SURROGATE],
  ['huge', HUGE],
] as const) {
  add(`exec: command ${what}`, () => sb.exec(value as never), ['command'])
}
for (const [what, value] of [
  ['a string', 'a b'],
  ['with a number', [5]],
  ['with a NUL byte', ['a\0']],
  ['with a lone surrogate', [LONE_SURROGATE]],
  ['an object', {}],
] as const) {
  add(`exec: args ${what}`, () => sb.exec('echo', value as never), ['args'])
}

// ---- sb.command, waitFor, ready ----
for (const [what, value] of [
  ['a number', 5],
  ['empty', ''],
  ['NUL byte', 'c\0'],
  ['huge', HUGE],
] as const)
  add(`command: id ${what}`, () => sb.command(value as never), ['command id'])
add('waitFor: unknown status', () => sb.waitFor('sleeping' as never), ['sleeping'])
add('waitFor: timeoutMs negative', () => sb.waitFor('ready', { timeoutMs: -1 }), ['timeoutMs', '-1'])
add('ready: options a string', () => sb.ready('x' as never), ['waitFor options'])

// ---- Command methods ----
add('cancel: mode unknown', () => cmd.cancel({ mode: 'nice' as never }), ['nice'])
add('cancel: graceMs negative', () => cmd.cancel({ graceMs: -1 }), ['graceMs', '-1'])
add('cancel: options unknown key', () => cmd.cancel({ signal: 'SIGTERM' } as never), ['signal'])
add('kill: signal without SIG', () => cmd.kill('TERM' as never), ['TERM'])
add('kill: signal a number', () => cmd.kill(9 as never), ['9'])
add('kill: signal unknown', () => cmd.kill('SIGNOPE' as never), ['SIGNOPE'])
add(
  'kill: signal unknown, of a command that ended',
  async () => {
    const ended = sb.start('true')
    await ended.wait()
    await ended.kill('SIGFOO' as never)
  },
  ['SIGFOO'],
)
add('exec: env value of 200 000 bytes', () => exec({ env: { BIG: 'x'.repeat(200_000) } }), ['BIG'])
add('snapshots.layerDir: a path out of the store', () => rt.snapshots.layerDir('../../..'), ['../../..'])
for (const [what, value] of BAD_NUMBERS.filter(([what]) => what !== 'huge'))
  add(`readLogs: afterSeq ${what}`, () => cmd.readLogs({ afterSeq: value as never }), [
    'afterSeq',
    ...valueNeedle(value),
  ])
add('readLogs: limit 0', () => cmd.readLogs({ limit: 0 }), ['limit', '0'])
add('readLogs: stream stdin', () => cmd.readLogs({ stream: 'stdin' as never }), ['stdin'])
add('readLogs: unknown key', () => cmd.readLogs({ from: 0 } as never), ['from'])
add(
  'logs: afterSeq NaN',
  async () => {
    for await (const _ of cmd.logs({ afterSeq: NaN })) break
  },
  ['afterSeq', 'NaN'],
)
add('downloadLogs: stream unknown', () => cmd.downloadLogs('stdin' as never, path.join(scratch, 'log')), ['stdin'])
add('downloadLogs: destination a number', () => cmd.downloadLogs('stdout', 5 as never), ['destination'])

// ---- sb.fs ----
const BAD_PATHS: [string, unknown][] = [
  ['a number', 5],
  ['empty', ''],
  ['relative', 'etc/passwd'],
  ['a NUL byte', '/etc/pa\0sswd'],
  ['a lone surrogate', `/tmp/${LONE_SURROGATE}`],
  ['too long', '/' + 'p'.repeat(5000)],
]
const pathOps: [string, (p: unknown) => unknown][] = [
  ['ls', (p) => sb.fs.ls(p as never)],
  ['stat', (p) => sb.fs.stat(p as never)],
  ['mkdir', (p) => sb.fs.mkdir(p as never)],
  ['writeFile', (p) => sb.fs.writeFile(p as never, 'x')],
  ['readFile', (p) => sb.fs.readFile(p as never)],
  ['rm', (p) => sb.fs.rm(p as never)],
  ['chmod', (p) => sb.fs.chmod(p as never, { mode: 0o644 })],
  ['mv src', (p) => sb.fs.mv(p as never, '/tmp/x')],
  ['mv dst', (p) => sb.fs.mv('/tmp', p as never)],
  ['grep', (p) => sb.fs.grep(p as never, 'x')],
  ['sed', (p) => sb.fs.sed({ path: p as never }, 'x', 'y')],
  ['upload remote', (p) => sb.fs.upload(scratch, p as never)],
  ['download remote', (p) => sb.fs.download(p as never, path.join(scratch, 'dl'))],
]
for (const [op, run] of pathOps)
  for (const [what, value] of BAD_PATHS) add(`fs.${op}: path ${what}`, () => run(value), [])
for (const [what, value] of [
  ['a number', 5],
  ['empty', ''],
  ['a NUL byte', '/tmp/a\0'],
  ['missing', '/nonexistent/krunbox-host-path'],
] as const) {
  add(
    `fs.upload: localPath ${what}`,
    () => sb.fs.upload(value as never, '/tmp/up'),
    ['localPath'].filter(() => what !== 'missing').concat(what === 'missing' ? [value as string] : []),
  )
  if (what !== 'missing')
    add(`fs.download: localPath ${what}`, () => sb.fs.download('/etc/hostname', value as never), ['localPath'])
}
add('fs.download: localPath parent missing', () => sb.fs.download('/etc/hostname', '/nonexistent/krunbox/x'), [
  '/nonexistent/krunbox/x',
])
for (const [what, value] of [
  ['not octal', 'rwx'],
  ['negative', -1],
  ['too large', 0o10000],
  ['a fraction', 1.5],
  ['NaN', NaN],
] as const) {
  add(`fs.mkdir: mode ${what}`, () => sb.fs.mkdir('/tmp/m', { mode: value as never }), ['mode'])
  add(`fs.writeFile: mode ${what}`, () => sb.fs.writeFile('/tmp/m', 'x', { mode: value as never }), ['mode'])
}
optionObjects('fs.mkdir', (o) => sb.fs.mkdir('/tmp/m', o as never))
optionObjects('fs.writeFile', (o) => sb.fs.writeFile('/tmp/m', 'x', o as never))
optionObjects('fs.rm', (o) => sb.fs.rm('/tmp/m', o as never))
optionObjects('fs.mv', (o) => sb.fs.mv('/tmp/m', '/tmp/n', o as never))
optionObjects('fs.grep', (o) => sb.fs.grep('/tmp', 'x', o as never))
optionObjects('fs.sed', (o) => sb.fs.sed({ path: '/tmp' }, 'x', 'y', o as never))
optionObjects('fs.upload', (o) => sb.fs.upload(scratch, '/tmp/u', o as never))
add('fs.writeFile: data a number', () => sb.fs.writeFile('/tmp/d', 5 as never), ['/tmp/d'])
add('fs.writeFile: data null', () => sb.fs.writeFile('/tmp/d', null as never), ['/tmp/d'])
add('fs.writeFile: signal a string', () => sb.fs.writeFile('/tmp/d', 'x', { signal: 'x' as never }), ['signal'])
add('fs.chmod: nothing to change', () => sb.fs.chmod('/tmp', {}), ['/tmp'])
add('fs.chmod: options missing', () => sb.fs.chmod('/tmp', undefined as never), ['/tmp'])
add('fs.chmod: uid negative', () => sb.fs.chmod('/tmp', { uid: -1 }), ['uid', '-1'])
add('fs.chmod: gid NaN', () => sb.fs.chmod('/tmp', { gid: NaN }), ['gid', 'NaN'])
add('fs.grep: pattern empty', () => sb.fs.grep('/tmp', ''), ['pattern'])
add('fs.grep: pattern a number', () => sb.fs.grep('/tmp', 5 as never), ['pattern'])
add('fs.grep: pattern does not compile', () => sb.fs.grep('/tmp', '(['), ['(['])
add('fs.grep: maxMatches 0', () => sb.fs.grep('/tmp', 'x', { maxMatches: 0 }), ['maxMatches'])
add('fs.grep: maxLineBytes Infinity', () => sb.fs.grep('/tmp', 'x', { maxLineBytes: Infinity }), ['maxLineBytes'])
add('fs.grep: include a number', () => sb.fs.grep('/tmp', 'x', { include: 5 as never }), ['include'])
add('fs.grep: exclude empty', () => sb.fs.grep('/tmp', 'x', { exclude: [''] }), ['exclude'])
add('fs.sed: target a string', () => sb.fs.sed('/tmp' as never, 'x', 'y'), ['target'])
add('fs.sed: target both files and path', () => sb.fs.sed({ files: ['/tmp/a'], path: '/tmp' } as never, 'x', 'y'), [
  'both',
])
add('fs.sed: files empty', () => sb.fs.sed({ files: [] }, 'x', 'y'), ['files'])
add('fs.sed: files relative', () => sb.fs.sed({ files: ['a'] }, 'x', 'y'), ['files[0]'])
add('fs.sed: replacement a number', () => sb.fs.sed({ path: '/tmp' }, 'x', 5 as never), ['replacement'])
add('fs.sed: unknown target key', () => sb.fs.sed({ path: '/tmp', recurse: true } as never, 'x', 'y'), ['recurse'])

// ---- images API ----
const store = () => rt.images
for (const [what, value] of [
  ['a number', 5],
  ['empty', ''],
  ['traversal', '../x'],
  ['a NUL byte', 'a\0'],
  ['upper case', 'Base'],
  ['huge', HUGE],
] as const) {
  add(`images.resolve: name ${what}`, () => store().resolve(value as never), ['image name'])
  add(`images.remove: name ${what}`, () => store().remove(value as never), ['image name'])
}
add('images.verify: name with traversal', () => store().verify('../base'), ['../base'])
add(
  'images.build: options unknown key',
  () => store().build('never-registered', { bogusOption: true } as never),
  ['bogusOption'],
  ['S001'],
)
add(
  'images.build: force a string',
  () => store().build('never-registered', { force: 'yes' } as never),
  ['force'],
  ['S001'],
)
add(
  'images.build: onProgress a string',
  () => store().build('never-registered', { onProgress: 'log' } as never),
  ['onProgress'],
  ['S001'],
)
add('images.register: source a number', () => store().register('mine', 5 as never), ['source'])
add('images.register: name of a preset', () => store().register('base', '/tmp'), ['base'])
add('images.register: source missing', () => store().register('mine', '/nonexistent/krunbox-image'), [
  '/nonexistent/krunbox-image',
])
add('images.prune: keep a string', () => store().prune({ keep: 'abc' } as never), ['keep'])
add('images.prune: options unknown key', () => store().prune({ all: true } as never), ['all'])
add('new ImageStore: cacheDir a number', () => new ImageStore({ cacheDir: 5 as never }), ['cacheDir'])
add('new ImageStore: unknown key', () => new ImageStore({ dir: '/tmp' } as never), ['dir'])

// ---- run the library cases ----
async function expectCoded(c: Case): Promise<void> {
  let timer: NodeJS.Timeout | undefined
  const outcome = await Promise.race([
    (async () => c.run())().then(
      (value) => ({ accepted: value }),
      (error: unknown) => ({ error }),
    ),
    new Promise<{ hung: true }>((resolve) => (timer = setTimeout(() => resolve({ hung: true }), CASE_DEADLINE_MS))),
  ])
  clearTimeout(timer)
  if ('hung' in outcome) throw new Error(`${c.label}: no answer within ${CASE_DEADLINE_MS} ms`)
  if ('accepted' in outcome) {
    // Whatever got through must not linger.
    const v = outcome.accepted as { stop?: () => Promise<void>; cancel?: () => Promise<unknown> } | undefined
    if (v instanceof Sandbox) await v.stop().catch(() => {})
    throw new Error(`${c.label}: accepted silently`)
  }
  const err = outcome.error
  expect(err, `${c.label}: ${String(err)}`).toBeInstanceOf(SandboxError)
  const e = err as SandboxError
  expect(DOCUMENTED.has(e.code), `${c.label}: ${e.code} is not in ERRORS.md`).toBe(true)
  if (c.codes) expect(c.codes).toContain(e.code)
  for (const needle of c.needles) expect(e.message, c.label).toContain(needle)
}

describe(`bad inputs to the library (${cases.length} cases)`, () => {
  it('covers at least 200 cases', () => {
    expect(cases.length).toBeGreaterThanOrEqual(200)
  })
  for (const c of cases) it(c.label, () => expectCoded(c), CASE_DEADLINE_MS + 5_000)
})

// ---- the CLI ----
const ID = '00000000-0000-4000-8000-000000000000'
const cliCases: [string, string[], string[]][] = [
  ['no verb', ['bogus-verb'], ['bogus-verb']],
  ['run without an image', ['run'], ['<image>']],
  ['run without a command', ['run', 'base'], ['--']],
  ['run with an unknown image', ['run', 'no-such-image', '--', 'true'], ['no-such-image']],
  ['run --cpus not a number', ['run', 'base', '--cpus', 'two', '--', 'true'], ['two']],
  ['run --cpus 0', ['run', 'base', '--cpus', '0', '--', 'true'], ['cpus']],
  ['run --memory negative', ['run', 'base', '--memory', '-5', '--', 'true'], ['--memory']],
  ['run --timeout with an unknown unit', ['run', 'base', '--timeout', '5y', '--', 'true'], ['5y']],
  ['run --timeout nonsense', ['run', 'base', '--timeout', 'soon', '--', 'true'], ['soon']],
  ['run -e without =', ['run', 'base', '-e', 'FOO', '--', 'true'], ['FOO']],
  ['run -e reserved prefix', ['run', 'base', '-e', 'KRUNBOX_X=1', '--', 'true'], ['KRUNBOX_X']],
  ['run unknown flag', ['run', 'base', '--bogus', '--', 'true'], ['bogus']],
  ['create --ttl 0', ['create', 'base', '--ttl', '0s'], ['ttl']],
  ['create --idle-timeout nonsense', ['create', 'base', '--idle-timeout', 'forever'], ['forever']],
  ['create --name with a space', ['create', 'base', '--name', 'my box'], ['my box']],
  ['create with traversal image', ['create', '../../etc'], ['../../etc']],
  ['exec with a bad id', ['exec', 'nope', '--', 'true'], ['nope']],
  ['exec an unknown sandbox', ['exec', ID, '--', 'true'], [ID]],
  ['exec without a command', ['exec', ID], ['--']],
  ['logs without a command id', ['logs', ID], ['<commandId>']],
  ['logs --after-seq negative', ['logs', ID, 'c-1', '--after-seq', '-1'], ['--after-seq']],
  ['logs --after-seq a fraction', ['logs', ID, 'c-1', '--after-seq=1.5'], ['1.5']],
  ['list with an argument', ['list', 'extra'], ['extra']],
  ['list unknown flag', ['list', '--bogus'], ['bogus']],
  ['stop without an id', ['stop'], ['<id>']],
  ['stop a bad id', ['stop', '../../x'], ['../../x']],
  ['upload --mode not octal', ['upload', ID, '/tmp', '/tmp/x', '--mode', '999'], ['999']],
  ['upload missing remote', ['upload', ID, '/tmp'], ['<remote>']],
  ['download missing local', ['download', ID, '/etc/hostname'], ['<local|->']],
  ['images unknown subcommand', ['images', 'frobnicate'], ['frobnicate']],
  ['images build a bad name', ['images', 'build', '../x'], ['../x']],
  ['images rm without a name', ['images', 'rm'], ['<name>']],
  ['doctor with an argument', ['doctor', 'now'], ['now']],
]

describe(`bad inputs to the CLI (${cliCases.length} cases)`, () => {
  for (const [label, args, needles] of cliCases) {
    it(
      `krunbox ${label}: exit 125 and a documented code naming the value`,
      async () => {
        const r = await krunbox(args, { env: cli.env, timeoutMs: CASE_DEADLINE_MS })
        expect(r.signal, `${CLI} ${args.join(' ')} hung`).toBeNull()
        expect(r.code, r.stderr).toBe(125)
        const m = /^krunbox: (S\d{3}): (.*)$/m.exec(r.stderr)
        expect(m, r.stderr).not.toBeNull()
        expect(DOCUMENTED.has(m![1])).toBe(true)
        for (const needle of needles) expect(r.stderr).toContain(needle)
      },
      CASE_DEADLINE_MS + 5_000,
    )
  }
})

describe('a failing stdin stream', () => {
  // A plain Error, and a SandboxError as a stream from another sandbox (its file, its log) fails with.
  it.each([
    ['an Error', () => new Error('the source broke')],
    ['a SandboxError', () => new SandboxError('S205', 'the source broke: its sandbox is gone')],
  ])(
    'failing with %s fails the command at once with S225 (not swallowed until the timeout) and kills it',
    async (_what, failure) => {
      let sent = false
      const stdin = new Readable({
        read() {
          if (!sent) {
            sent = true
            this.push('first line\n')
          } else this.destroy(failure())
        },
      })
      const c = sb.start('cat', [], { stdin, timeoutMs: 120_000 })
      const err = await c.wait().then(
        () => null,
        (e: unknown) => e,
      )
      expect(err).toBeInstanceOf(SandboxError)
      expect((err as SandboxError).code).toBe('S225')
      expect((err as SandboxError).message).toContain('the source broke')
      // The agent's record of it ends too (killed by the cancel), rather than waiting for more stdin.
      for (;;) {
        const snap = (await sb.commands()).find((s) => s.id === c.id)
        if (snap && snap.status !== 'running' && snap.status !== 'starting' && snap.status !== 'queued') {
          expect(snap, JSON.stringify(snap)).toMatchObject({ status: 'canceled' })
          break
        }
        await new Promise((r) => setTimeout(r, 20))
      }
    },
  )
})
