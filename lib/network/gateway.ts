/**
 * One sandbox's network on the host side: its resolver, on a unix socket in the sandbox's
 * control directory that the sandbox's relay (agent/egress) carries its port 53 to, and its
 * proxy, on the listener the relay hands over (proxy-handoff.ts), both asking the same policy,
 * with one count of what they let through and what they refused. Every refusal is also an event
 * (the runtime re-emits it on the sandbox).
 */
import { EventEmitter } from 'node:events'
import fs from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { normalizeHost } from './address.js'
import { BoundedLookups, LookupFailure } from './lookups.js'
import { DNS_SOCKET } from './egress-socket.js'
import { hostLoopbackEntries, PolicyMatcher, type NetworkPolicy } from './policy.js'
import { startResolver, type ResolverLimits } from './dns.js'
import { startProxy, type Proxy, type ProxyLimits, type Route } from './proxy.js'
import { OwnLoopback } from './own-loopback.js'
import { handBack } from './proxy-handoff.js'
import { receiveListener } from '../native.js'
import type { BootEgress } from '../protocol/contract.gen.js'

/** Where the sandbox finds them: its own loopback, where the agent's relay listens. */
export const SANDBOX_PROXY_PORT = 3128
export const SANDBOX_DNS_PORT = 53

export interface NetworkDenial {
  /** `host:port` for a connection, the name for a lookup. */
  destination: string
  reason: string
  via: 'dns' | 'proxy'
  at: number
}

export interface NetworkUsage {
  /** Connections the proxy made for the sandbox. */
  allowed: number
  /** Lookups and connections refused. */
  denied: number
}

/** Where a sandbox's host side listens: its control directory, a host-only directory beside it, the sandbox root's host uid. */
export interface NetworkPlace {
  controlDir: string
  stagingDir: string
  owner?: number
}

/** What the agent's relay is told: the boot configuration's egress (protocol/v1.json; agent/egress.Config is the same). */
export type EgressConfig = BootEgress

export class SandboxNetwork extends EventEmitter<{ denied: [NetworkDenial]; allowed: [] }> {
  /** The unix socket the sandbox's relay carries its lookups to ('' for a network another process holds). */
  readonly dnsPath: string
  readonly #counts: NetworkUsage = { allowed: 0, denied: 0 }
  readonly #close: () => Promise<void>
  /** Where the counts come from when another process holds the network (keeper.ts). */
  readonly #keptUsage: (() => NetworkUsage) | null
  readonly #proxy: Proxy | null
  /** The host end of the proxy handoff (proxy-handoff.ts), once given; closed with the network. */
  #handoff: number | null = null
  /** The listener's receipt while a pool thread waits on the handoff end (its number must stay ours until then). */
  #receiving: Promise<unknown> | null = null

  private constructor(
    dnsPath: string,
    close: () => Promise<void>,
    proxy: Proxy | null,
    keptUsage: (() => NetworkUsage) | null = null,
  ) {
    super()
    this.dnsPath = dnsPath
    this.#close = close
    this.#proxy = proxy
    this.#keptUsage = keptUsage
  }

  /** A network held by a keeper process: its counts, read from where the keeper writes them. */
  static kept(usage: () => NetworkUsage): SandboxNetwork {
    return new SandboxNetwork('', async () => {}, null, usage)
  }

  /** `options` is for tests and benchmarks: other name servers, other limits. */
  static async start(
    policy: NetworkPolicy,
    cap: NetworkPolicy | null,
    place: NetworkPlace,
    options: { servers?: string[]; maxLookupsInFlight?: number; proxy?: ProxyLimits; resolver?: ResolverLimits } = {},
  ): Promise<SandboxNetwork> {
    const dnsPath = path.join(place.controlDir, DNS_SOCKET)
    const matcher = new PolicyMatcher(policy, cap)
    const ownLoopback = new OwnLoopback(hostLoopbackEntries(policy))
    const lookups = new BoundedLookups({ servers: options.servers, maxInFlight: options.maxLookupsInFlight })
    let self: SandboxNetwork | null = null
    const denied = (destination: string, reason: string, via: NetworkDenial['via']) => {
      if (!self) return
      self.#counts.denied++
      self.emit('denied', { destination, reason, via, at: Date.now() })
    }
    const resolver = await startResolver(
      {
        refuse: (name) => {
          const v = matcher.name(name)
          return v.allowed ? null : v.reason
        },
        addresses: async (name, family) => {
          const pinned = matcher.pinned(name)
          if (pinned)
            return net.isIPv4(pinned) === (family === 4) && matcher.address(pinned, undefined, name, true).allowed
              ? [pinned]
              : []
          return (await lookups.resolve(name, family)).filter((ip) => matcher.address(ip, undefined, name).allowed)
        },
        denied: (name, reason) => denied(name, reason, 'dns'),
      },
      { path: dnsPath, stagingDir: place.stagingDir, owner: place.owner },
      options.resolver,
    )
    const proxy = startProxy(
      {
        route: (host, port) => route(matcher, lookups, host, port),
        denied: (destination, reason) => denied(destination, reason, 'proxy'),
        allowed: () => {
          if (!self) return
          self.#counts.allowed++
          self.emit('allowed')
        },
        // Back over the handoff pair; with none yet (a test's network) such a request is routed.
        handBack: (method, target, bytes) => {
          const channel = self ? self.#handoff : null
          return channel !== null && ownLoopback.has(method, target) ? handBack(channel, bytes) : null
        },
      },
      options.proxy,
    )
    const closeAll = async () => {
      lookups.close()
      await Promise.all([proxy.close(), resolver.close()])
    }
    self = new SandboxNetwork(dnsPath, closeAll, proxy)
    return self
  }

  /**
   * Takes the sandbox's proxy listener over `channel`, the host end of the handoff pair
   * (proxy-handoff.ts; owned and closed by this network from here on): from then on the host
   * accepts the sandbox's proxy connections itself.
   */
  async takeProxyListener(channel: number, timeoutMs: number): Promise<void> {
    this.#handoff = channel
    const receiving = receiveListener(channel, SANDBOX_PROXY_PORT, timeoutMs)
    this.#receiving = receiving.catch(() => {})
    const fd = await receiving
    this.#receiving = null
    await this.#proxy!.adopt(fd)
  }

  /** Serves one connection to the proxy made elsewhere (tests and benches: test/helpers/egress.ts). */
  serveProxyConnection(client: net.Socket): void {
    this.#proxy!.serve(client)
  }

  usage(): NetworkUsage {
    return this.#keptUsage?.() ?? { ...this.#counts }
  }

  /** The relay's configuration for this policy. */
  static egressConfig(policy: NetworkPolicy): EgressConfig {
    return { proxyPort: SANDBOX_PROXY_PORT, dnsPort: SANDBOX_DNS_PORT, hostLoopback: hostLoopbackEntries(policy) }
  }

  /** The environment that points the sandbox's programs at the proxy. */
  static sandboxEnv(): Record<string, string> {
    const proxy = `http://127.0.0.1:${SANDBOX_PROXY_PORT}`
    const noProxy = 'localhost,127.0.0.1,::1'
    return {
      http_proxy: proxy,
      https_proxy: proxy,
      HTTP_PROXY: proxy,
      HTTPS_PROXY: proxy,
      no_proxy: noProxy,
      NO_PROXY: noProxy,
    }
  }

  close(): Promise<void> {
    this.removeAllListeners()
    const channel = this.#handoff
    this.#handoff = null
    // Closed under a waiting poll, its number could be reused by another socket the wait would then read.
    if (channel !== null) void (this.#receiving ?? Promise.resolve()).then(() => fs.closeSync(channel))
    return this.#close()
  }
}

/** Where a connection to host:port goes, or why it does not. `host` is as the sandbox wrote it. */
async function route(matcher: PolicyMatcher, lookups: BoundedLookups, written: string, port: number): Promise<Route> {
  // One spelling before any check: BAD.test. is bad.test, 2130706433 and [::ffff:7f00:1] are 127.0.0.1.
  const host = normalizeHost(written)
  if (host === null) return { refused: `${JSON.stringify(written.slice(0, 255))} is not a host name or address` }
  if (host.kind === 'ip') {
    const v = matcher.address(host.ip, port, null)
    return v.allowed ? { address: host.ip } : { refused: v.reason }
  }
  const name = host.name
  const byName = matcher.name(name, port)
  if (!byName.allowed) return { refused: byName.reason }
  const pinned = matcher.pinned(name)
  if (pinned) {
    const v = matcher.address(pinned, port, name, true)
    return v.allowed ? { address: pinned } : { refused: v.reason }
  }
  const found: string[] = []
  let failure = ''
  for (const family of [4, 6] as const) {
    try {
      found.push(...(await lookups.resolve(name, family)))
    } catch (err) {
      if (err instanceof LookupFailure && (err.kind === 'busy' || err.kind === 'failed')) failure = ` (${err.message})`
    }
  }
  if (found.length === 0) return { refused: `${name} does not resolve${failure}` }
  // The address checked is the address connected to: a name cannot be re-pointed in between.
  let last = ''
  for (const ip of found) {
    const v = matcher.address(ip, port, name)
    if (v.allowed) return { address: ip }
    last = v.reason
  }
  return { refused: `${name} resolves only to refused addresses (${last})` }
}
