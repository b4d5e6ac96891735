/**
 * A sandbox's name lookups on the host, bounded. dns.lookup runs getaddrinfo on libuv's
 * threadpool, where slow lookups hold slots the host application's own lookups (and fs work)
 * wait for: 12 queries for names that never answer stalled the host's dns.lookup for a minute.
 * A dns.promises.Resolver is c-ares on the event loop, with no thread per query; with a short
 * timeout and a cap on the lookups one sandbox has in flight, a sandbox costs the host a few
 * sockets at most. The resolver and the proxy of a sandbox share one instance.
 *
 * What it answers is what DNS says: the host's /etc/hosts is not consulted (a sandbox is not
 * given the host's private names).
 */
import dns from 'node:dns'

/** Per try; a name server that does not answer costs TRIES × this at most. */
export const LOOKUP_TIMEOUT_MS = 2_000
const TRIES = 2
/** Lookups of one sandbox in flight at once (its resolver's and its proxy's together). */
export const MAX_LOOKUPS_IN_FLIGHT = 16

/** Why a lookup gave no addresses: the name has none, the upstream failed, or the sandbox is over its cap. */
export class LookupFailure extends Error {
  constructor(
    readonly kind: 'no-such-name' | 'no-data' | 'failed' | 'busy',
    message: string,
  ) {
    super(message)
  }
}

export class BoundedLookups {
  readonly #resolver: dns.promises.Resolver
  readonly #max: number
  #inFlight = 0

  constructor(options: { maxInFlight?: number; servers?: string[] } = {}) {
    this.#resolver = new dns.promises.Resolver({ timeout: LOOKUP_TIMEOUT_MS, tries: TRIES })
    if (options.servers) this.#resolver.setServers(options.servers)
    this.#max = options.maxInFlight ?? MAX_LOOKUPS_IN_FLIGHT
  }

  get inFlight(): number {
    return this.#inFlight
  }

  /** The addresses of `name` in one family; a LookupFailure when there are none. */
  async resolve(name: string, family: 4 | 6): Promise<string[]> {
    if (this.#inFlight >= this.#max)
      throw new LookupFailure('busy', `${this.#max} lookups of this sandbox are already in flight`)
    this.#inFlight++
    try {
      return family === 4 ? await this.#resolver.resolve4(name) : await this.#resolver.resolve6(name)
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code
      if (code === dns.NOTFOUND) throw new LookupFailure('no-such-name', `${name} does not exist`)
      if (code === dns.NODATA) throw new LookupFailure('no-data', `${name} has no IPv${family} address`)
      throw new LookupFailure('failed', `the lookup of ${name} failed (${code ?? (err as Error).message})`)
    } finally {
      this.#inFlight--
    }
  }

  /** Ends the lookups in flight (they fail with dns.CANCELLED). */
  close(): void {
    this.#resolver.cancel()
  }
}
