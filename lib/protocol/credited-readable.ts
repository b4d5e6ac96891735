/**
 * A streamed answer of the agent (a tar, a layer) as a Readable whose credit goes back only as
 * its consumer takes the bytes, so a slow consumer slows the agent instead of filling the host.
 * Bytes that arrived while the Readable was full are credited in one go when it drains. Closing
 * the Readable early cancels the request; a failed request destroys it with the error.
 */
import { PassThrough, type Readable } from 'node:stream'
import type { SandboxError } from '../errors.js'
import type { AgentConnection } from './client.js'
import type { OpName, OpRequest } from './contract.gen.js'

/** The ops that stream their answer as DATA and take a window. */
type StreamedOp = 'fs.read' | 'fs.tarCreate' | 'sandbox.snapshot'

export function creditedReadable<O extends StreamedOp & OpName>(
  conn: AgentConnection,
  op: O,
  args: Omit<OpRequest<O>, 'window'>,
  window: number,
  highWaterMark = window,
): Readable {
  const out = new PassThrough({ highWaterMark })
  let owed = 0
  const stream = conn.request(
    op,
    { ...args, window },
    {
      manualCredit: true,
      onData: (data) => {
        const room = out.write(data)
        if (room && owed === 0) {
          stream.consumed(data.length)
          return
        }
        if (owed === 0) {
          out.once('drain', () => {
            const n = owed
            owed = 0
            stream.consumed(n)
          })
        }
        owed += data.length
      },
    },
  )
  out.on('close', () => {
    if (!stream.done) stream.cancel()
  })
  stream.result.then(
    () => out.end(),
    (err: SandboxError) => out.destroy(err),
  )
  return out
}
