/**
 * The host end of a sandbox's proxy handoff (agent/egress/handoff.go): over a unix seqpacket
 * pair made at create, the sandbox's relay sends its proxy listener (127.0.0.1:3128 in the
 * sandbox's network namespace), and the host's proxy accepts the sandbox's connections on it
 * itself: the relay's hop is gone from every request. The host holds the only copy, so when it
 * is gone a connect to the proxy port is refused.
 *
 * A request for the sandbox's own loopback (own-loopback.ts) goes back over the same pair: the
 * bytes read of it and one end of a new stream pair, whose other end the proxy joins to the
 * client. Only the agent reads what the host sends; nothing the agent sends after the listener
 * is read.
 */
import fs from 'node:fs'
import net from 'node:net'
import { sendFd, socketPair } from '../native.js'

/** Past this a request is not handed back (the relay reads 128 KiB per message). */
const HAND_BACK_MAX = 96 * 1024

/** The pair's two ends: the host's, and the one the agent inherits. Both close-on-exec. */
export function handoffPair(): { host: number; sandbox: number } {
  const [host, sandbox] = socketPair('seqpacket')
  return { host, sandbox }
}

/** Hands `bytes` (what was read of a request) back to the relay: the host's end of the new connection, or why not. */
export function handBack(channel: number, bytes: Buffer): net.Socket | Error {
  if (bytes.length > HAND_BACK_MAX) return new Error(`a request of ${bytes.length} bytes is too large to hand back`)
  let mine: number
  let theirs: number
  try {
    ;[mine, theirs] = socketPair('stream')
  } catch (err) {
    return err as Error
  }
  try {
    sendFd(channel, theirs, bytes)
  } catch (err) {
    fs.closeSync(mine)
    return err as Error
  } finally {
    fs.closeSync(theirs)
  }
  return new net.Socket({ fd: mine, allowHalfOpen: true, readable: true, writable: true })
}
