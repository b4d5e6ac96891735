/**
 * The namespace driver's side of a network policy: the host's resolver and proxy are up
 * before the sandbox boots (the agent points /etc/resolv.conf and the proxy variables at
 * them), and pasta joins the sandbox's network namespace once the agent is ready.
 */
import fs from 'node:fs'
import { SandboxNetwork } from '../network/gateway.js'
import { SandboxError } from '../errors.js'
import { installHint, requirement } from '../host-requirements.js'
import { startNetworkKeeper } from '../network/keeper.js'
import { attachPasta, pastaPath, sandboxInitPid } from '../network/pasta.js'
import type { BootSpec } from './types.js'
import { MESSAGES } from '../protocol/contract.gen.js'

export interface NamespaceNetwork {
  /** Its counts and refusals; set once attach() resolved. */
  network: SandboxNetwork
  /** What the agent's config gains: the proxy variables and the resolver. */
  agentConfig(spec: BootSpec): BootSpec['agent']
  /** Joins pasta to the sandbox of this bwrap process. */
  attach(bwrapPid: number, timeoutMs: number): Promise<void>
  /** Ends pasta and the host side. Idempotent. */
  close(): void
}

export async function prepareNamespaceNetwork(spec: BootSpec): Promise<NamespaceNetwork | null> {
  if (!spec.network) return null
  if (!pastaPath()) throw new SandboxError('S302', MESSAGES.namespaceUnavailable({ subject: 'pasta', problem: `is not on PATH; a sandbox with a network policy needs it; install it: ${installHint(requirement('pasta'))}` }))
  if (process.getuid?.() !== 0 && !tunUsable()) {
    throw new SandboxError('S302', MESSAGES.namespaceUnavailable({ subject: '/dev/net/tun', problem: 'is kept to root (mode 0600) on this host; a sandbox with a network policy needs it readable and writable by this user (pasta makes its tap with it)' }))
  }
  const agentConfig = (s: BootSpec) => ({
    ...s.agent,
    env: { ...SandboxNetwork.sandboxEnv(), ...s.agent.env },
    resolvConf: `# krunbox: the host answers for the names the sandbox's network policy allows\nnameserver 127.0.0.1\noptions ndots:1 attempts:1\n`,
  })
  const policy = spec.network
  if (spec.detached) {
    // Nothing on the host until the sandbox is up: the keeper starts the whole host side then.
    const kept: NamespaceNetwork = {
      network: SandboxNetwork.kept(() => ({ allowed: 0, denied: 0 })),
      agentConfig,
      async attach(bwrapPid, timeoutMs) {
        kept.network = await startNetworkKeeper({ policy, cap: spec.networkCap, targetPid: sandboxInitPid(bwrapPid), sandboxDir: spec.sandboxDir, timeoutMs })
      },
      // The keeper ends with the sandbox's network namespace.
      close() {},
    }
    return kept
  }
  const network = await SandboxNetwork.start(policy, spec.networkCap)
  let pasta: { kill(signal: NodeJS.Signals): void } | null = null
  let closed = false
  return {
    network,
    agentConfig,
    async attach(bwrapPid, timeoutMs) {
      const child = await attachPasta({ targetPid: sandboxInitPid(bwrapPid), ports: network, sandboxDir: spec.sandboxDir, timeoutMs })
      pasta = child
      if (closed) child.kill('SIGKILL')
    },
    close() {
      if (closed) return
      closed = true
      pasta?.kill('SIGKILL')
      void network.close().catch(() => {})
    },
  }
}

/** pasta opens /dev/net/tun as the host user; Debian makes it 0666, some hosts keep it root's. */
function tunUsable(): boolean {
  try {
    fs.accessSync('/dev/net/tun', fs.constants.R_OK | fs.constants.W_OK)
    return true
  } catch {
    return false
  }
}
