/**
 * A runtime's concurrency slots: one per live sandbox under maxConcurrentSandboxes, held until
 * it ends. A create takes one synchronously (S401 when none is free), or with `queue` waits for
 * one in arrival order; close() refuses every waiter.
 */
import { createAborted } from './create-pipeline.js'
import { SandboxError } from './errors.js'
import { errors } from './protocol/errors.gen.js'

interface Waiter {
  grant: () => void
  refuse: (err: SandboxError) => void
}

export class Slots {
  readonly #max: number
  readonly #queue: boolean
  /** A slot came free with no create waiting for it (the runtime's pools refill then). */
  readonly #onIdle: () => void
  #taken = 0
  /** Creates queued for a slot, in arrival order: granted one, or refused. */
  #waiters: Waiter[] = []
  #closed = false

  constructor(max: number, queue: boolean, onIdle: () => void) {
    this.#max = max
    this.#queue = queue
    this.#onIdle = onIdle
  }

  /** Set by close(): no create starts any more, and none still waits for a slot. */
  get closed(): boolean {
    return this.#closed
  }

  /** A slot is free and nobody waits for it (a pool may boot another member). */
  hasFree(): boolean {
    return this.#taken < this.#max && this.#waiters.length === 0
  }

  /**
   * A slot, held until the sandbox ends: its release function at once, S401 when none is free,
   * or (queue: true) a promise of one in arrival order. Synchronous on purpose: a check before
   * an await and a take after it would let parallel creates all pass the check.
   */
  take(signal?: AbortSignal): (() => void) | Promise<() => void> {
    const grant = () => {
      this.#taken++
      let released = false
      return () => {
        if (released) return
        released = true
        this.#taken--
        const waiter = this.#waiters.shift()
        if (waiter) waiter.grant()
        else this.#onIdle()
      }
    }
    if (this.#closed) throw runtimeClosed('create()')
    if (this.#taken < this.#max) return grant()
    if (!this.#queue) {
      throw errors.tooManySandboxes({ max: this.#max, fix: 'stop a sandbox or create the runtime with queue: true' })
    }
    return new Promise((resolve, reject) => {
      const waiter = {
        grant: () => {
          signal?.removeEventListener('abort', leave)
          resolve(grant())
        },
        refuse: (err: SandboxError) => {
          signal?.removeEventListener('abort', leave)
          reject(err)
        },
      }
      // An aborted create leaves the queue; the slot goes to the next one.
      const leave = () => {
        this.#waiters.splice(this.#waiters.indexOf(waiter), 1)
        reject(createAborted('while it waited for a slot under maxConcurrentSandboxes', signal))
      }
      this.#waiters.push(waiter)
      signal?.addEventListener('abort', leave, { once: true })
    })
  }

  /** No slot is given any more; every create still waiting is refused (S206). */
  close(): void {
    this.#closed = true
    for (const waiter of this.#waiters.splice(0)) waiter.refuse(runtimeClosed('create()'))
  }
}

/** S206 for a call on a runtime that close() ended (or is ending). */
export function runtimeClosed(call: string): SandboxError {
  return errors.aborted({ subject: call, problem: 'was refused: its runtime was closed' })
}
