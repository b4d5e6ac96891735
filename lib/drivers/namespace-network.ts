/**
 * The namespace driver's side of a network policy. The sandbox keeps a network namespace of its
 * own with nothing but `lo`; the agent's relay (agent/egress) listens on its proxy and resolver
 * ports and carries each connection over a unix socket in the control directory to the host's
 * proxy and resolver (lib/network/gateway.ts). No per-sandbox network stack, no peer check: the
 * socket a connection arrives on names the sandbox.
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
   * `handoffFd`), handed to the caller, who closes it once bwrap holds it; null without one
   * (a detached sandbox's proxy connections go through the relay to the keeper).
   */
  takeHandoffEnd(): number | null
  /** Once bwrap runs: a detached sandbox's host side goes to the keeper, which lets go of it when `hostPid` (bwrap) ends. */
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
  if (spec.detached) {
    // Until the keeper listens the relay's connects fail: the sandbox reaches nothing (create has not returned yet).
    const kept: NamespaceNetwork = {
      network: SandboxNetwork.kept(() => ({ allowed: 0, denied: 0 })),
      agentConfig,
      async attach(hostPid, timeoutMs) {
        kept.network = await startNetworkKeeper({
          policy,
          cap: spec.networkCap,
          place,
          targetPid: hostPid,
          sandboxDir: spec.sandboxDir,
          timeoutMs,
        })
      },
      takeHandoffEnd: () => null,
      // The keeper lets go of it when the sandbox's PID 1 ends.
      close() {},
    }
    return kept
  }
  const network = await SandboxNetwork.start(policy, spec.networkCap, place)
  let pair: { host: number; sandbox: number | null } | null
  try {
    pair = handoffPair()
  } catch (err) {
    await network.close()
    throw err
  }
  let closed = false
  return {
    network,
    agentConfig,
    takeHandoffEnd() {
      const end = pair?.sandbox ?? null
      if (pair) pair.sandbox = null
      return end
    },
    async attach(_hostPid, timeoutMs) {
      const host = pair!.host
      pair = null
      await network.takeProxyListener(host, timeoutMs)
    },
    close() {
      if (closed) return
      closed = true
      // Ends not handed on yet; the network closes its own.
      for (const fd of [pair?.host, pair?.sandbox]) if (fd != null) fs.closeSync(fd)
      pair = null
      void network.close().catch(() => {})
    },
  }
}
