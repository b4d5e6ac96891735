/**
 * Who is at the other end of a connection to one of our loopback listeners (forward(): a
 * sandbox's proxy and resolver listen on unix sockets instead, see egress-socket.ts). It listens
 * on the host's 127.0.0.1, where every local user can reach it; the kernel's socket tables name
 * the owner of the connecting socket.
 *
 * One read of a table answers every check waiting for it: 4 000 connections at once used to be
 * 4 000 reads of the whole table (each as large as the number of connections), 3.3 GiB and
 * seconds-long stalls. A check waits for a read that starts after it was asked, so the socket
 * it asks about is in that read.
 */
import fsp from 'node:fs/promises'
import type net from 'node:net'

/** Row fields of /proc/net/tcp{,6}: "sl local rem st queues tr retrnsmt uid …". */
const LOCAL = 1
const REMOTE = 2
const UID = 7

const portOf = (hexAddress: string) => parseInt(hexAddress.slice(hexAddress.lastIndexOf(':') + 1), 16)
const addressOf = (hexAddress: string) => hexAddress.slice(0, hexAddress.lastIndexOf(':'))
/** 127.0.0.1 as the tables print it, and as an IPv4-mapped IPv6 address. */
const LOOPBACK = new Set(['0100007F', '0000000000000000FFFF00000100007F'])

type Row = string[]

/**
 * Reads a pair of tables, one read at a time, shared by every caller that asked before it
 * began; each read is indexed once (`index`), so a check costs a map lookup.
 */
class SharedTableRead<Index> {
  #running: Promise<Index> | null = null
  #queued: Promise<Index> | null = null

  constructor(
    readonly tables: string[],
    readonly index: (rows: Row[]) => Index,
  ) {}

  /** The index of a read that began after this call. */
  rows(): Promise<Index> {
    if (!this.#running) return this.#start()
    // The read under way may have begun before the caller's socket existed: wait for the next.
    this.#queued ??= this.#running.then(
      () => this.#start(),
      () => this.#start(),
    )
    return this.#queued
  }

  #start(): Promise<Index> {
    this.#queued = null
    const read = this.#read().finally(() => {
      if (this.#running === read) this.#running = null
    })
    this.#running = read
    return read
  }

  async #read(): Promise<Index> {
    const rows: Row[] = []
    for (const table of this.tables) {
      let text: string
      try {
        text = await fsp.readFile(table, 'latin1')
      } catch {
        continue
      }
      const lines = text.split('\n')
      for (let i = 1; i < lines.length; i++) {
        const f = lines[i].trim().split(/\s+/)
        if (f.length > UID) rows.push(f)
      }
    }
    return this.index(rows)
  }
}

/** TCP sockets on 127.0.0.1 by "localPort>remotePort": their uid. */
const tcp = new SharedTableRead(['/proc/net/tcp', '/proc/net/tcp6'], (rows) => {
  const byPorts = new Map<string, number>()
  for (const f of rows)
    if (LOOPBACK.has(addressOf(f[LOCAL]))) byPorts.set(`${portOf(f[LOCAL])}>${portOf(f[REMOTE])}`, Number(f[UID]))
  return byPorts
})
/**
 * The uid owning the socket that connected from 127.0.0.1:`peerPort` to our `localPort`, or null
 * when the tables have no such socket (it is gone already, or lives in another network namespace).
 */
export async function loopbackPeerUid(peerPort: number, localPort: number): Promise<number | null> {
  return (await tcp.rows()).get(`${peerPort}>${localPort}`) ?? null
}

/** Whether the peer of an accepted loopback connection runs as this process's user. */
export async function peerIsOwnUser(socket: net.Socket): Promise<boolean> {
  const { remotePort, localPort, remoteAddress } = socket
  if (remotePort === undefined || localPort === undefined || !isLoopbackPeer(remoteAddress)) return false
  return (await loopbackPeerUid(remotePort, localPort)) === process.getuid?.()
}

function isLoopbackPeer(address: string | undefined): boolean {
  return address === '127.0.0.1' || address === '::ffff:127.0.0.1'
}
