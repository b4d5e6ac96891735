/**
 * Idle upstream connections of one sandbox's proxy (proxy.ts). After a plain-HTTP answer ends
 * exactly where its framing says, the proxy keeps the upstream connection, and the next
 * bodiless request the policy routes to the same checked address and port goes over it instead
 * of a new connect, as forward proxies do. Each request is still routed by the policy first;
 * the pool only saves the connect. One pool per proxy, so one sandbox's connection never
 * carries another sandbox's request.
 *
 * An idle connection that sends anything, ends, errs or stays idle past `idleMs` is closed:
 * bytes an upstream sends between answers never become the next request's answer.
 */
import type net from 'node:net'

export interface UpstreamPoolLimits {
  /** Idle connections kept at once, over every destination. */
  total: number
  /** Idle connections kept per address and port. */
  perDestination: number
  /** How long one stays idle before it is closed (below the 5 s servers commonly keep one). */
  idleMs: number
}

export const UPSTREAM_POOL_LIMITS: UpstreamPoolLimits = { total: 16, perDestination: 4, idleMs: 4_000 }

export class UpstreamPool {
  readonly #idle = new Map<string, Map<net.Socket, () => void>>()
  #size = 0
  readonly #limits: UpstreamPoolLimits

  constructor(limits: UpstreamPoolLimits = UPSTREAM_POOL_LIMITS) {
    this.#limits = limits
  }

  /** An idle connection kept for `key` (`address:port`), the longest kept first, or null. */
  take(key: string): net.Socket | null {
    const kept = this.#idle.get(key)
    if (!kept) return null
    for (const [socket, forget] of kept) {
      forget()
      if (!socket.destroyed) return socket
    }
    return null
  }

  /** Keeps a connection whose answer ended cleanly, or closes it when the pool is full. */
  keep(key: string, socket: net.Socket): void {
    let kept = this.#idle.get(key)
    if (socket.destroyed || this.#size >= this.#limits.total || (kept?.size ?? 0) >= this.#limits.perDestination) {
      socket.destroy()
      return
    }
    if (!kept) this.#idle.set(key, (kept = new Map()))
    const set = kept
    const drop = () => {
      forget()
      socket.destroy()
    }
    const forget = () => {
      if (!set.delete(socket)) return
      this.#size--
      if (set.size === 0) this.#idle.delete(key)
      socket.removeListener('data', drop)
      socket.removeListener('end', drop)
      socket.removeListener('error', drop)
      socket.removeListener('close', forget)
      socket.removeListener('timeout', drop)
      socket.setTimeout(0)
    }
    set.set(socket, forget)
    this.#size++
    socket.on('data', drop)
    socket.once('end', drop)
    socket.once('error', drop)
    socket.once('close', forget)
    socket.setTimeout(this.#limits.idleMs)
    socket.once('timeout', drop)
    socket.resume()
  }

  /** Idle connections now (for tests). */
  get size(): number {
    return this.#size
  }

  close(): void {
    for (const kept of [...this.#idle.values()])
      for (const [socket, forget] of [...kept]) {
        forget()
        socket.destroy()
      }
  }
}
