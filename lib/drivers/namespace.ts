/**
 * The namespace driver: a bubblewrap sandbox (user, pid, mount, net, ipc, uts namespaces)
 * whose PID 1 is our agent. The agent assembles the overlay root itself; bubblewrap only
 * provides the namespaces and the three things the agent needs: the image (read-only),
 * the control directory and the agent binary.
 *
 * On a root host the user namespace is made by the native spawner with the sandbox's id
 * range (idmap.ts) and bwrap runs inside it as that namespace's root; without root, the spawner
 * makes it too when the user has subordinate ids (subids.ts: the user is the sandbox's root, its
 * ranges ids 1..), else bwrap makes it and maps the sandbox's root to the user alone. On a root
 * host the three paths bwrap binds are also staged by the spawner (idmap.ts), since bwrap
 * resolves its sources by path; the user reaches its own paths as they are.
 */
import fs from 'node:fs'
import fsp from 'node:fs/promises'
import path from 'node:path'
import { installHint, requirement } from '../host-requirements.js'
import { agentBinaryPath, bubblewrapPath } from '../paths.js'
import { fsBatch, type FsOp } from '../native.js'
import { createCgroups, type WorkloadLeaf } from './cgroups.js'
import { prepareNamespaceNetwork, type NamespaceNetwork } from './namespace-network.js'
import { namespaceOwner, ownForSandboxIds, sandboxIdMapping, stageBinds, type IdMapping } from './idmap.js'
import { subordinateIdMapping } from './subids.js'
import { spawnSupervised } from './supervise.js'
import { readTail } from './tail.js'
import type { AgentConfig, BootedSandbox, BootSpec, Driver, DriverCapabilities } from './types.js'
import { type BootWorkloadCgroup } from '../protocol/contract.gen.js'
import { errors } from '../protocol/errors.gen.js'

/** Where the agent listens inside the sandbox: the control directory, bound from the state directory. */
export const AGENT_LISTEN_PATH = '/krunbox/ctl/agent.sock'

/**
 * The agent's capabilities at boot, bounding set included (bwrap and the spawner drop every other one):
 * CAP_SYS_ADMIN to mount the overlay root and pivot into it, CAP_DAC_OVERRIDE because
 * overlayfs checks the mounter's access to its layers, CAP_SETPCAP to lock its securebits
 * and empty its bounding set; CAP_SETUID, CAP_SETGID, CAP_CHOWN, CAP_KILL and CAP_DAC_READ_SEARCH,
 * which the agent alone keeps (in its user namespace) to start commands as another user, hand
 * files to them, signal them and read what they made (agent/boot/caps.go); CAP_FOWNER only to
 * hand on; CAP_NET_BIND_SERVICE to bind a network policy's resolver on port 53 (agent/egress).
 * It drops the rest before it serves;
 * commands get none, unless the sandbox's `capabilities` give some to its root.
 */
export const AGENT_CAPABILITIES = [
  'CAP_SYS_ADMIN',
  'CAP_DAC_OVERRIDE',
  'CAP_DAC_READ_SEARCH',
  'CAP_SETPCAP',
  'CAP_SETUID',
  'CAP_SETGID',
  'CAP_CHOWN',
  'CAP_KILL',
  'CAP_FOWNER',
  'CAP_NET_BIND_SERVICE',
] as const

/**
 * The bounding set bwrap starts with in the user namespace the spawner makes on a root host
 * (bwrap narrows it only in one of its own): the agent's capabilities and CAP_NET_ADMIN, with
 * which bwrap brings up the new network namespace's loopback. Numbers from capabilities(7).
 */
const CAPABILITY_NUMBER = {
  CAP_CHOWN: 0,
  CAP_DAC_OVERRIDE: 1,
  CAP_DAC_READ_SEARCH: 2,
  CAP_FOWNER: 3,
  CAP_KILL: 5,
  CAP_SETGID: 6,
  CAP_SETUID: 7,
  CAP_SETPCAP: 8,
  CAP_NET_BIND_SERVICE: 10,
  CAP_NET_ADMIN: 12,
  CAP_SYS_ADMIN: 21,
} as const
export const BWRAP_BOUNDING_SET = [...AGENT_CAPABILITIES, 'CAP_NET_ADMIN' as const].map((cap) => CAPABILITY_NUMBER[cap])

/** What bwrap binds: the image, the control directory and the agent binary. */
export interface BindSources {
  image: string
  control: string
  agent: string
  /** A snapshot's layer (a fork), see lib/snapshots.ts. */
  layer?: string
}

/**
 * What the agent inherits as fds 3, 4, … (bwrap passes them through), in this order: the workload
 * leaf's files, when there is one (cgroup v1 checks a write to `tasks` with the credentials the
 * file was opened with, so fds opened here need no permission on the files for the sandbox's own
 * uid), then its listening socket, made here so the host can connect and send its HELLO while the
 * agent boots, then its configuration (a file only the host's user may read, unlinked once the
 * sandbox started: its `env` holds the caller's secrets, which no argv or environment may carry).
 */
interface InheritedFds {
  workloadCgroup?: BootWorkloadCgroup
  listenFd: number
}

/** The fd numbers the agent gets (openInherited opens them in this order, the proxy handoff's end last). */
function inheritedNumbers(leaf: WorkloadLeaf | null): { inherited: InheritedFds; configFd: number; handoffFd: number } {
  const tasks = leaf ? leaf.tasksFiles.length + 1 : 0
  const workloadCgroup = leaf
    ? { tasksFds: leaf.tasksFiles.map((_, i) => 3 + i), oomControlFd: 3 + leaf.tasksFiles.length }
    : undefined
  return {
    inherited: { ...(workloadCgroup && { workloadCgroup }), listenFd: 3 + tasks },
    configFd: 4 + tasks,
    handoffFd: 5 + tasks,
  }
}

/** Where the configuration waits for bwrap (the sandbox's host-only directory, 0700). */
const agentConfigFile = (spec: BootSpec) => path.join(spec.sandboxDir, 'agent-config.json')

/**
 * Writes the agent's configuration (0600, never over an existing file or link) and opens the
 * fds in one more task of the libuv pool (a create never waits on the main thread). With
 * `handoff` the relay's configuration names the fd the proxy handoff's end will have: the
 * caller appends that end to the fds.
 */
async function openInherited(
  spec: BootSpec,
  leaf: WorkloadLeaf | null,
  socket: { path: string; owner: number | undefined },
  handoff: boolean,
): Promise<{ fds: number[]; configFd: number }> {
  const { inherited, configFd, handoffFd } = inheritedNumbers(leaf)
  const configFile = agentConfigFile(spec)
  // Typed as the contract's boot configuration: a field the agent would not read fails tsc.
  const config: AgentConfig = {
    ...spec.agent,
    listenPath: AGENT_LISTEN_PATH,
    ...inherited,
    ...(handoff && spec.agent.egress && { egress: { ...spec.agent.egress, handoffFd } }),
  }
  await fsp.writeFile(configFile, JSON.stringify(config), {
    mode: 0o600,
    flag: 'wx',
  })
  const ops: FsOp[] = leaf
    ? [
        ...leaf.tasksFiles.map((path): FsOp => ({ op: 'open', path, flags: 'w' })),
        { op: 'open', path: leaf.oomControlFile, flags: 'r' },
      ]
    : []
  // The sandbox's root owns it, as it would one the agent made (Runtime.attach checks that).
  ops.push({
    op: 'listen',
    path: socket.path,
    ...(socket.owner !== undefined && { uid: socket.owner, gid: socket.owner }),
  })
  ops.push({ op: 'open', path: configFile, flags: 'r' })
  return { fds: await fsBatch(ops), configFd }
}

/** bwrap's command line: nothing in it may be secret (every local user reads it in /proc). */
export function bubblewrapArgs(
  spec: BootSpec,
  sources: BindSources,
  mapping: IdMapping | null,
  configFd: number,
): string[] {
  const args = [
    // With a mapping we are already root of the sandbox's own user namespace.
    ...(mapping ? [] : ['--unshare-user', '--uid', '0', '--gid', '0']),
    '--unshare-pid',
    '--unshare-ipc',
    '--unshare-uts',
    '--unshare-cgroup-try',
    '--hostname',
    spec.hostname,
    '--new-session',
    '--as-pid-1',
    // The agent starts with only what it needs, in its user namespace only (AGENT_CAPABILITIES).
    '--cap-drop',
    'ALL',
    ...AGENT_CAPABILITIES.flatMap((cap) => ['--cap-add', cap]),
    '--clearenv',
    '--setenv',
    'KRUNBOX_AGENT_CONFIG_FD',
    String(configFd),
    // Not secret (ps shows it anyway): names the sandbox's processes on the host, as the configuration did.
    '--setenv',
    'KRUNBOX_SANDBOX_ID',
    spec.id,
    '--dev',
    '/dev',
    // A fresh proc mount in a user namespace is only allowed where one is already visible.
    '--proc',
    '/krunbox/proc',
    '--tmpfs',
    '/krunbox',
    '--ro-bind',
    sources.image,
    '/krunbox/image',
    '--bind',
    sources.control,
    '/krunbox/ctl',
    '--ro-bind',
    sources.agent,
    '/krunbox/agent',
    ...(sources.layer ? ['--ro-bind', sources.layer, '/krunbox/layer'] : []),
    // Always a network namespace of its own: a network policy reaches out through the agent's relay.
    '--unshare-net',
  ]
  // With artifacts, the reaper ends an owned sandbox whose host died, after it archived them.
  if (!spec.detached && !spec.agent.artifacts) args.push('--die-with-parent')
  args.push('/krunbox/agent')
  return args
}

export class NamespaceDriver implements Driver {
  readonly name = 'namespace' as const
  readonly capabilities: DriverCapabilities = {
    agentMode: 'namespace',
    fork: true,
    // pasta and the host-side gateway (namespace-network.ts) see every connection.
    networkPolicy: { enforced: true },
    hostIdsFromSubordinates: true,
    processExecutable: 'bwrap',
    // The host holds the rights over the sandbox's namespaces that krunbox-reset uses.
    resetForReuse: true,
  }

  async boot(spec: BootSpec): Promise<BootedSandbox> {
    const bwrap = bubblewrapPath()
    if (!bwrap)
      throw errors.namespaceUnavailable({
        subject: 'bubblewrap (bwrap)',
        problem: `is not on PATH; install it: ${installHint(requirement('bwrap'))}`,
      })
    const agentPath = agentBinaryPath()
    const mapping = sandboxIdMapping()
    const socketPath = path.join(spec.controlDir, 'agent.sock')
    const stderrPath = path.join(spec.sandboxDir, 'stderr.log')
    // Independent tasks of the libuv pool, side by side. createCgroups never rejects (it reports what it could not make).
    const cgroupsMade = createCgroups(
      spec.id,
      { memoryMb: spec.memoryMb, cpus: spec.cpus, pidsMax: spec.pidsMax, diskMb: spec.agent.upperSizeMb },
      { workloadLeaf: true },
    )
    // With no mapping the image and the control dir are the user's own, as its sandbox's root: nothing to hand over.
    const [subordinate] = await Promise.all([
      mapping ? null : subordinateIdMapping(),
      mapping && ownForSandboxIds(mapping, spec.imageRootfs, spec.controlDir),
    ]).catch(async (err: unknown) => {
      await (await cgroupsMade).remove()
      throw err
    })
    const cgroups = await cgroupsMade
    const stderrTail = () => readTail(stderrPath)
    const direct = [spec.imageRootfs, spec.controlDir, agentPath, ...(spec.snapshotLayer ? [spec.snapshotLayer] : [])]
    const staged = mapping ? stageBinds(direct) : null
    const [image, control, agent, layer] = staged ? staged.paths : direct
    let child
    let fds: number[] = []
    let network: NamespaceNetwork | null = null
    try {
      network = await prepareNamespaceNetwork(spec, mapping?.hostRoot)
      if (network) spec = { ...spec, agent: network.agentConfig(spec) }
      const opened = await openInherited(
        spec,
        cgroups.workload,
        { path: socketPath, owner: mapping?.hostRoot },
        network !== null,
      )
      fds = opened.fds
      // Last, at the number the configuration gave it; the network owned it until here.
      const handoffEnd = network?.takeHandoffEnd() ?? null
      if (handoffEnd !== null) fds.push(handoffEnd)
      child = await spawnSupervised({
        file: bwrap,
        args: bubblewrapArgs(spec, { image, control, agent, layer }, mapping ?? subordinate, opened.configFd),
        stderrFile: stderrPath,
        cgroupJoinFiles: cgroups.joinFiles,
        dieWithParent: !spec.detached && !spec.agent.artifacts,
        extraFds: fds,
        // Root may: bwrap's child then dies with bwrap even while it waits for bwrap's go-ahead
        // (a host SIGKILLed then would otherwise leave it blocked for good).
        // The namespace is the sandbox's own uid's (idmap.ts namespaceOwner): its kernel budgets are not root's.
        ...(staged &&
          mapping && {
            stagedBinds: staged.binds,
            userNamespace: { ...mapping, owner: namespaceOwner(spec.id) },
            boundingCapabilities: BWRAP_BOUNDING_SET,
            pidNamespace: true,
          }),
        ...(subordinate && { userNamespace: subordinate, boundingCapabilities: BWRAP_BOUNDING_SET }),
      })
    } catch (err) {
      network?.close()
      await cgroups.remove()
      throw err
    } finally {
      // cgroup files, a socket and a file: closing one never waits, so not worth a wake-up of the pool each.
      for (const fd of fds) fs.closeSync(fd)
      // bwrap holds it open now (or never will): the secrets leave the disk.
      fs.rmSync(agentConfigFile(spec), { force: true })
    }
    const cleanup = () => {
      network?.close()
      return cgroups.remove()
    }
    const ready = (async () => {
      try {
        // A detached sandbox's host side goes to the keeper while the agent boots (bwrap lives as long as the sandbox).
        const attached = network?.attach(child.pid, spec.bootTimeoutMs)
        attached?.catch(() => {})
        await child.waitForLine('READY', spec.bootTimeoutMs)
        await Promise.all([cgroups.booted(), attached])
      } catch (err) {
        child.kill('SIGKILL')
        await child.exited
        await cleanup()
        const tail = stderrTail()
        const reason = (err as Error).message
        throw errors.bootFailed(
          { sandboxId: spec.id, reason: `${reason}${tail ? `\n--- stderr tail ---\n${tail}` : ''}` },
          {
            cause: err,
            details: { stderrTail: tail },
          },
        )
      }
    })()
    ready.catch(() => {}) // the caller awaits it; unhandled until then is not an error
    return {
      pid: child.pid,
      socketPath,
      listensEarly: true,
      exited: child.exited,
      kill: () => child.kill('SIGKILL'),
      limits: { enforced: cgroups.enforced, reason: cgroups.reason, cgroupPaths: cgroups.dirs },
      stderrTail,
      ...(network && { network: network.network }),
      cleanup,
      ready,
    }
  }
}
