/**
 * The host end of a sandbox's lookups: a unix socket in the sandbox's control directory (0700,
 * the sandbox's root's), 0600 and owned by the sandbox's root, so only the sandbox's own relay
 * (agent/egress) and host root can connect. The host knows the sandbox by the socket a
 * connection arrives on: no peer check, no system table read.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import type net from 'node:net'

/** The socket's name in the control directory (agent/egress/egress.go has the same). */
export const DNS_SOCKET = 'dns.sock'

/** Where a host end listens: its path, a host-only directory to make it in, its owner (default: this user). */
export interface EgressSocket {
  path: string
  stagingDir: string
  owner?: number
}

/**
 * Listens on `socketPath` in a control directory the sandbox can write to. The socket is bound,
 * narrowed and owned in `stagingDir` (host-only) and renamed into place: chmod/chown by path in
 * a directory the sandbox writes would follow a link it planted there (to any host file).
 */
export async function listenPrivate(
  server: net.Server,
  socketPath: string,
  stagingDir: string,
  owner?: number,
): Promise<void> {
  // Short: a unix socket path holds 107 bytes, and this one must fit wherever agent.sock does.
  const staged = path.join(stagingDir, `.${path.basename(socketPath)[0]}${crypto.randomBytes(3).toString('hex')}`)
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(staged, () => {
      server.removeListener('error', reject)
      resolve()
    })
  })
  server.on('error', () => {})
  try {
    // Made with the umask's mode: no one but its owner can write (connect) before this.
    fs.chmodSync(staged, 0o600)
    if (owner !== undefined && owner !== process.getuid?.()) fs.chownSync(staged, owner, owner)
    fs.renameSync(staged, socketPath)
  } catch (err) {
    server.close()
    fs.rmSync(staged, { force: true })
    throw err
  }
}
