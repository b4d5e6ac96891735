/**
 * A sandbox's code contexts (sb.runCode and the context methods): the options checked, a
 * default context per language started on first use, the bridge program written once into the
 * sandbox (root-owned, read-only to the contexts' uids), and each context on its own uid so that
 * one context's cells cannot reach another's kernel, files or sockets (docs/code-interpreter.md).
 */
import { randomBytes, randomInt } from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import {
  CODE_CONTEXT_UIDS,
  CODE_MAX_CELL_BYTES,
  CODE_OUTPUT_BYTES,
  CODE_OUTPUT_MESSAGES,
  CODE_TIMEOUT_MS,
} from '../defaults.js'
import type { SandboxFs } from '../fs.js'
import {
  absolutePath,
  assertString,
  commandTimeout,
  envMap,
  intInRange,
  oneOf,
  optionalAbortSignal,
  optionsObject,
} from '../options.js'
import { packageRoot } from '../paths.js'
import { errors } from '../protocol/errors.gen.js'
import { KernelContext, type CellRequest } from './context.js'
import type { ExecutionListeners } from './execution.js'
import type { KernelSandbox } from './kernel-process.js'
import {
  CODE_LANGUAGES,
  type CodeContext,
  type CodeEvent,
  type CodeLanguage,
  type CreateCodeContextOptions,
  type Execution,
  type RunCodeOptions,
} from './types.js'

/** What the interpreter needs of its sandbox. */
export interface CodeSandbox extends KernelSandbox {
  readonly id: string
  readonly fs: SandboxFs
}

const RUN_KEYS = [
  'language',
  'context',
  'timeoutMs',
  'signal',
  'maxOutputBytes',
  'maxOutputMessages',
  'onStdout',
  'onStderr',
  'onResult',
  'onError',
] as const
const CONTEXT_KEYS = ['language', 'cwd', 'env'] as const

let bridgeSource: Buffer | null = null
function readBridge(): Buffer {
  bridgeSource ??= fs.readFileSync(path.join(packageRoot, 'lib', 'code', 'bridge', 'code_bridge.py'))
  return bridgeSource
}

export class CodeInterpreter {
  #contexts = new Map<string, KernelContext>()
  #defaults = new Map<CodeLanguage, KernelContext>()
  #bridge: Promise<string> | null = null

  constructor(private readonly sandbox: CodeSandbox) {}

  async runCode(code: string, options?: RunCodeOptions): Promise<Execution> {
    const { context, request } = this.#cell(code, options, {})
    return (await context).run(request)
  }

  /** The cell's outputs as they come, then `end` with the execution; an error of runCode is thrown by the iterator. */
  async *runCodeStream(code: string, options?: RunCodeOptions): AsyncGenerator<CodeEvent, void, undefined> {
    const queue: CodeEvent[] = []
    let wake: (() => void) | null = null
    const { context, request } = this.#cell(code, options, {
      onEvent: (event) => {
        queue.push(event)
        wake?.()
      },
    })
    let failure: { error: unknown } | null = null
    let finished = false
    void (await context)
      .run(request)
      .then(
        (execution) => queue.push({ type: 'end', execution }),
        (error: unknown) => (failure = { error }),
      )
      .finally(() => {
        finished = true
        wake?.()
      })
    for (;;) {
      const next = queue.shift()
      if (next !== undefined) {
        yield next
        if (next.type === 'end') return
        continue
      }
      if (failure !== null) throw (failure as { error: unknown }).error
      if (finished) return
      await new Promise<void>((resolve) => (wake = resolve))
      wake = null
    }
  }

  async createContext(options?: CreateCodeContextOptions): Promise<CodeContext> {
    const o = optionsObject(options, 'createCodeContext options', CONTEXT_KEYS)
    const language = oneOf(o.language, 'language', CODE_LANGUAGES, 'python')
    const cwd = o.cwd === undefined ? undefined : absolutePath(o.cwd, 'cwd')
    const env = envMap(o.env, 'env')
    const context = await this.#newContext(language, cwd, env, false)
    try {
      await context.ensureStarted()
    } catch (err) {
      this.#contexts.delete(context.id)
      throw err
    }
    return context.info()
  }

  /** Starts the language's default context (a pool does this before a lease). */
  async startDefault(language: CodeLanguage): Promise<void> {
    await (await this.#defaultContext(language)).ensureStarted()
  }

  list(): CodeContext[] {
    return [...this.#contexts.values()].map((c) => c.info())
  }

  async restart(context: CodeContext | string): Promise<void> {
    await this.#lookup(context).restart()
  }

  async remove(context: CodeContext | string): Promise<void> {
    const found = this.#lookup(context)
    this.#contexts.delete(found.id)
    if (this.#defaults.get(found.launch.language) === found) this.#defaults.delete(found.launch.language)
    await found.remove()
  }

  #cell(
    code: string,
    options: RunCodeOptions | undefined,
    extra: ExecutionListeners,
  ): { context: Promise<KernelContext>; request: CellRequest } {
    assertString(code, 'code', { nonEmpty: false })
    const bytes = Buffer.byteLength(code, 'utf8')
    if (bytes > CODE_MAX_CELL_BYTES)
      throw errors.outOfRange({
        field: 'code',
        allowed: `at most ${CODE_MAX_CELL_BYTES} bytes`,
        value: `${bytes} bytes`,
      })
    const o = optionsObject(options, 'runCode options', RUN_KEYS)
    const listeners: ExecutionListeners = { ...extra }
    for (const name of ['onStdout', 'onStderr', 'onResult', 'onError'] as const) {
      const value = o[name]
      if (value !== undefined && typeof value !== 'function')
        throw errors.badArgument({ subject: name, problem: `must be a function, got ${typeof value}` })
      listeners[name] = value as never
    }
    const request: CellRequest = {
      code,
      listeners,
      timeoutMs: commandTimeout(o.timeoutMs, 'timeoutMs', CODE_TIMEOUT_MS),
      signal: optionalAbortSignal(o.signal, 'signal'),
      caps: {
        maxBytes: intInRange(
          o.maxOutputBytes,
          'maxOutputBytes',
          CODE_OUTPUT_BYTES.min,
          CODE_OUTPUT_BYTES.max,
          CODE_OUTPUT_BYTES.default,
        ),
        maxMessages: intInRange(
          o.maxOutputMessages,
          'maxOutputMessages',
          CODE_OUTPUT_MESSAGES.min,
          CODE_OUTPUT_MESSAGES.max,
          CODE_OUTPUT_MESSAGES.default,
        ),
      },
    }
    const language = o.language === undefined ? undefined : oneOf(o.language, 'language', CODE_LANGUAGES, 'python')
    if (o.context !== undefined) {
      const context = this.#lookup(o.context as CodeContext | string)
      if (language !== undefined && language !== context.launch.language)
        throw errors.badArgument({
          subject: `language ${language}`,
          problem: `does not match code context ${context.id}, a ${context.launch.language} context`,
        })
      return { context: Promise.resolve(context), request }
    }
    return { context: this.#defaultContext(language ?? 'python'), request }
  }

  #lookup(context: CodeContext | string): KernelContext {
    const id = typeof context === 'string' ? context : (context as CodeContext | null)?.id
    if (typeof id !== 'string')
      throw errors.badArgument({
        subject: 'context',
        problem: `must be a code context or its id, got ${typeof context === 'object' ? 'an object without an id' : typeof context}`,
      })
    const found = this.#contexts.get(id)
    if (!found)
      throw errors.badArgument({
        subject: `code context ${JSON.stringify(id.slice(0, 64))}`,
        problem: `is not a context of sandbox ${this.sandbox.id} (removed, or made by another handle)`,
      })
    return found
  }

  async #defaultContext(language: CodeLanguage): Promise<KernelContext> {
    const known = this.#defaults.get(language)
    if (known && !known.removed) return known
    const context = await this.#newContext(language, undefined, {}, true)
    // Two first calls at once share the one that was made first.
    const raced = this.#defaults.get(language)
    if (raced && !raced.removed) {
      this.#contexts.delete(context.id)
      return raced
    }
    this.#defaults.set(language, context)
    return context
  }

  async #newContext(
    language: CodeLanguage,
    cwd: string | undefined,
    env: Record<string, string>,
    isDefault: boolean,
  ): Promise<KernelContext> {
    const bridgePath = await this.#bridgePath()
    const id = `ctx-${randomBytes(8).toString('hex')}`
    const context = new KernelContext(
      this.sandbox,
      { language, contextId: id, bridgePath, uid: this.#freeUid(), cwd, env },
      isDefault,
    )
    this.#contexts.set(id, context)
    return context
  }

  #freeUid(): number {
    const taken = new Set([...this.#contexts.values()].map((c) => c.launch.uid))
    for (;;) {
      const uid = randomInt(CODE_CONTEXT_UIDS.min, CODE_CONTEXT_UIDS.max + 1)
      if (!taken.has(uid)) return uid
    }
  }

  /**
   * The bridge, written once per handle by the agent (as root) into a new directory of a name
   * no one could guess beforehand: 0755 and 0644, so no context's uid can change it.
   */
  #bridgePath(): Promise<string> {
    this.#bridge ??= (async () => {
      const dir = `/tmp/.krunbox-code-${randomBytes(8).toString('hex')}`
      await this.sandbox.fs.mkdir(dir, { mode: 0o755 })
      const file = `${dir}/code_bridge.py`
      await this.sandbox.fs.writeFile(file, readBridge(), { mode: 0o644 })
      return file
    })()
    const pending = this.#bridge
    pending.catch(() => {
      if (this.#bridge === pending) this.#bridge = null
    })
    return pending
  }
}
