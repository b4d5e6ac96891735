/**
 * The namespace driver's side of a network policy. The sandbox keeps a network namespace of its
 * own with nothing but `lo`; the agent's relay (agent/egress) binds its proxy and resolver ports,
 * hands the proxy's listener to the host over the handoff pair (proxy-handoff.ts), and carries
 * each resolver connection over a unix socket in the control directory (lib/network/gateway.ts).
 * No per-sandbox network stack, no peer check: the listener or socket a connection arrives on
 * names the sandbox.
 */
import fs from 'node:fs'
import { SandboxNetwork } from '../network/gateway.js'
import { handoffPair } from '../network/proxy-handoff.js'
import { startNetworkKeeper } from '../network/keeper.js'
import type { BootSpec } from './types.js'

export interface NamespaceNetwork {
  /** Its counts and refusals; set once attach() resolved. */
  network: SandboxNetwork
  /** What the agent's config gains: the proxy variables, the resolver, the relay. */
  agentConfig(spec: BootSpec): BootSpec['agent']
  /**
   * The end of the proxy handoff pair the agent inherits (its number there goes in the relay's
   * `handoffFd`), handed to the caller, who closes it once bwrap holds it. The host end goes to
   * this process's proxy, or a detached sandbox's to the keeper.
   */
  takeHandoffEnd(): number | null
  /** Once bwrap runs: takes the relay's proxy listener; a detached sandbox's host side goes to the keeper, which lets go of it when `hostPid` (bwrap) ends. */
  attach(hostPid: number, timeoutMs: number): Promise<void>
  /** Ends the host side. Idempotent. */
  close(): void
}

/** `owner`: the host uid of the sandbox's root, who alone may connect to the sockets. */
export async function prepareNamespaceNetwork(
  spec: BootSpec,
  owner: number | undefined,
): Promise<NamespaceNetwork | null> {
  if (!spec.network) return null
  const policy = spec.network
  const agentConfig = (s: BootSpec) => ({
    ...s.agent,
    env: { ...SandboxNetwork.sandboxEnv(), ...s.agent.env },
    resolvConf: `# krunbox: the host answers for the names the sandbox's network policy allows\nnameserver 127.0.0.1\noptions ndots:1 attempts:1\n`,
    egress: SandboxNetwork.egressConfig(policy),
  })
  const place = { controlDir: spec.controlDir, stagingDir: spec.sandboxDir, owner }
  const network = spec.detached
    ? SandboxNetwork.kept(() => ({ allowed: 0, denied: 0 }))
    : await SandboxNetwork.start(policy, spec.networkCap, place)
  let pair: { host: number | null; sandbox: number | null }
  try {
    pair = handoffPair()
  } catch (err) {
    await network.close()
    throw err
  }
  /** Closes the ends not handed on (the network closes its own). */
  const closeEnds = () => {
    for (const fd of [pair.host, pair.sandbox]) if (fd !== null) fs.closeSync(fd)
    pair = { host: null, sandbox: null }
  }
  let closed = false
  const handle: NamespaceNetwork = {
    network,
    agentConfig,
    takeHandoffEnd() {
      const end = pair.sandbox
      pair.sandbox = null
      return end
    },
    async attach(hostPid, timeoutMs) {
      const host = pair.host!
      if (!spec.detached) {
        pair.host = null
        return network.takeProxyListener(host, timeoutMs)
      }
      // Until the keeper holds it the sandbox's proxy connections wait and its lookups fail (create has not returned yet).
      try {
        handle.network = await startNetworkKeeper({
          policy,
          cap: spec.networkCap,
          place,
          targetPid: hostPid,
          sandboxDir: spec.sandboxDir,
          timeoutMs,
          handoffEnd: host,
        })
      } finally {
        // The keeper has its own copy now (or none, and the sandbox reaches nothing).
        closeEnds()
      }
    },
    close() {
      if (closed) return
      closed = true
      closeEnds()
      // A detached sandbox's keeper lets go of it when the sandbox's PID 1 ends.
      if (!spec.detached) void network.close().catch(() => {})
    },
  }
  return handle
}
