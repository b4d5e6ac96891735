/**
 * Who is at the other end of a connection to one of our loopback listeners. The sandbox's
 * proxy listens on the host's 127.0.0.1, where every local user can reach it; only pasta (run
 * by this process, so as this process's user) has any business there. The kernel's socket
 * tables name the owner of the connecting socket.
 */
import fsp from 'node:fs/promises'
import type net from 'node:net'

/** Row fields of /proc/net/tcp{,6}: "sl local rem st queues tr retrnsmt uid …". */
const LOCAL = 1
const REMOTE = 2
const UID = 7

const portOf = (hexAddress: string) => parseInt(hexAddress.slice(hexAddress.lastIndexOf(':') + 1), 16)
/** 127.0.0.1 as the tables print it, and as an IPv4-mapped IPv6 address. */
const LOOPBACK = ['0100007F:', '0000000000000000FFFF00000100007F:']
const onLoopback = (hexAddress: string) => LOOPBACK.some((prefix) => hexAddress.startsWith(prefix))

/**
 * The uid owning the socket that connected from `peerPort` to our `localPort`, or null when
 * the tables have no such socket (it is gone already, or lives in another network namespace).
 */
export async function loopbackPeerUid(peerPort: number, localPort: number): Promise<number | null> {
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string
    try {
      text = await fsp.readFile(table, 'utf8')
    } catch {
      continue
    }
    for (const line of text.split('\n').slice(1)) {
      const f = line.trim().split(/\s+/)
      if (f.length > UID && onLoopback(f[LOCAL]) && portOf(f[LOCAL]) === peerPort && portOf(f[REMOTE]) === localPort) return Number(f[UID])
    }
  }
  return null
}

/** Whether the peer of an accepted loopback connection runs as this process's user. */
export async function peerIsOwnUser(socket: net.Socket): Promise<boolean> {
  const { remotePort, localPort } = socket
  if (remotePort === undefined || localPort === undefined) return false
  return (await loopbackPeerUid(remotePort, localPort)) === process.getuid?.()
}
