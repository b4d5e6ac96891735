/**
 * pasta (Debian's `passt` package) joined to a sandbox's network namespace. It forwards
 * exactly two ports of the sandbox's loopback to the host's loopback: the proxy (TCP) and
 * the resolver (UDP). Nothing else: no port of the host is forwarded in (-t/-u none, where
 * pasta's default would forward them all), no route out (the tap it adds stays down and
 * unconfigured: the sandbox has no capability to bring it up), no gateway mapped to the host.
 */
import fs from 'node:fs'
import path from 'node:path'
import { SandboxError } from '../errors.js'
import { findExecutable } from '../paths.js'
import { spawnSupervised, type SupervisedProcess } from '../drivers/supervise.js'
import { readTail } from '../drivers/tail.js'
import { SANDBOX_DNS_PORT, SANDBOX_PROXY_PORT } from './gateway.js'
import { MESSAGES } from '../protocol/contract.gen.js'

export function pastaPath(): string | null {
  return findExecutable('pasta')
}

/**
 * `userns`/`netns`: paths of the sandbox's namespaces as pasta can open them. pasta drops its
 * capabilities before it joins, so it cannot open /proc/<pid>/ns/* of a process another uid owns
 * (a sandbox whose user namespace belongs to a uid of its own): the host opens them and passes
 * the fds (/proc/self/fd/N).
 */
export function pastaArgs(namespaces: { userns: string; netns: string }, proxyPort: number, dnsPort: number, asRoot: boolean): string[] {
  return [
    '--foreground', '--quiet',
    // As root pasta would switch to nobody, who may not enter the sandbox's namespaces.
    ...(asRoot ? ['--runas', '0'] : []),
    '-t', 'none', '-u', 'none',
    '-T', `${SANDBOX_PROXY_PORT}:${proxyPort}`,
    '-U', `${SANDBOX_DNS_PORT}:${dnsPort}`,
    // Its tap, down and unconfigured, would otherwise carry the name of the host's interface.
    '--ns-ifname', 'tap0',
    '--no-map-gw', '--no-dhcp', '--no-dhcpv6', '--no-ndp', '--no-ra', '--no-icmp',
    // pasta writes its pid here once its forwards are in place: our readiness signal.
    '--pid', '/dev/stdout',
    '--userns', namespaces.userns,
    '--netns', namespaces.netns,
  ]
}

/** The host pid of the sandbox's PID 1 (the agent): bwrap's only child. */
export function sandboxInitPid(bwrapPid: number): number {
  const children = fs.readFileSync(`/proc/${bwrapPid}/task/${bwrapPid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean)
  if (children.length !== 1) throw new SandboxError('S300', `bwrap ${bwrapPid} has ${children.length} children, expected the agent alone`)
  return Number(children[0])
}

/**
 * Joins pasta to the network namespace of `targetPid`, forwarding to the host side's `ports`
 * (a SandboxNetwork); its stderr goes to `pasta.log` in the sandbox's directory.
 */
export async function attachPasta(options: { targetPid: number; ports: { proxyPort: number; dnsPort: number }; sandboxDir: string; timeoutMs: number }): Promise<SupervisedProcess> {
  const pasta = pastaPath()
  if (!pasta) throw new SandboxError('S302', MESSAGES.namespaceUnavailable({ subject: 'pasta', problem: 'is not on PATH (Debian package passt); it gives sandboxes with a network policy their network; run the project setup' }))
  const stderrFile = path.join(options.sandboxDir, 'pasta.log')
  const fds: number[] = []
  let child: SupervisedProcess
  try {
    for (const ns of ['user', 'net']) fds.push(fs.openSync(`/proc/${options.targetPid}/ns/${ns}`, 'r'))
    child = await spawnSupervised({
      file: pasta,
      args: pastaArgs({ userns: '/proc/self/fd/3', netns: '/proc/self/fd/4' }, options.ports.proxyPort, options.ports.dnsPort, process.getuid?.() === 0),
      stderrFile,
      cgroupJoinFiles: [],
      dieWithParent: true,
      extraFds: fds,
    })
  } finally {
    for (const fd of fds) fs.closeSync(fd)
  }
  try {
    await child.waitForLine(String(child.pid), options.timeoutMs)
  } catch (err) {
    child.kill('SIGKILL')
    await child.exited
    throw new Error(`pasta did not join the sandbox's network: ${(err as Error).message}: ${readTail(stderrFile).trim()}`, { cause: err })
  }
  return child
}
