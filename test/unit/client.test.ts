/**
 * The host's protocol client against a hostile peer: a test-only unix-socket server that
 * answers the handshake and then sends whatever the test scripts. The client must reject
 * every violation cleanly (the request it concerns rejects with a code, the connection goes
 * on, nothing throws into the process).
 */
import fs from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import {
  AgentConnection,
  type AgentStream,
  IMPLICIT_SEND_CREDIT,
  type StreamHandlers,
  UPLOAD_ABORT_ANSWER_MS,
} from '../../lib/protocol/client.js'
import {
  encodeFrame,
  encodeOutput,
  encodeWindow,
  FLAG_END,
  FrameDecoder,
  FrameType,
  MAX_PAYLOAD,
} from '../../lib/protocol/frame.js'

/** The fake peer also answers ops the contract does not have (test.*): those are called past the types. */
interface UntypedCalls {
  call(op: string, args?: object, options?: { timeoutMs?: number }): Promise<Record<string, unknown>>
  request(op: string, args?: object, handlers?: StreamHandlers): AgentStream
}
const untyped = (conn: AgentConnection): UntypedCalls => {
  const loose = conn as unknown as { call: UntypedCalls['call']; request: UntypedCalls['request'] }
  return {
    call: (op, args = {}, options) => loose.call(op, args, options),
    request: (op, args = {}, handlers) => loose.request(op, args, handlers),
  }
}

type Script = (socket: net.Socket, request: { stream: number; body: Record<string, unknown> }) => void

const servers: net.Server[] = []
const dirs: string[] = []
afterEach(() => {
  for (const s of servers.splice(0)) s.close()
  for (const d of dirs.splice(0)) fs.rmSync(d, { recursive: true, force: true })
})

function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-client-'))
  dirs.push(dir)
  return dir
}

const HELLO = { version: 1, agent: 'test-peer', sandboxId: 'x', pid: 1, features: [] }

async function peer(onRequest: Script, hello: unknown = HELLO): Promise<string> {
  const dir = tempDir()
  const sock = path.join(dir, 's')
  const server = net.createServer((socket) => {
    const d = new FrameDecoder()
    socket.on('error', () => {})
    socket.on('data', (chunk) => {
      for (const f of d.push(chunk)) {
        if (f.type === FrameType.HELLO)
          socket.write(encodeFrame(0, FrameType.HELLO, 0, Buffer.from(JSON.stringify(hello))))
        else if (f.type === FrameType.REQUEST)
          onRequest(socket, { stream: f.stream, body: JSON.parse(f.payload.toString()) })
      }
    })
  })
  servers.push(server)
  await new Promise<void>((r) => server.listen(sock, r))
  return sock
}

const json = (v: unknown) => Buffer.from(JSON.stringify(v))

async function expectClosedWith(conn: AgentConnection, code: string) {
  const err = await new Promise<SandboxError | null>((r) =>
    conn.isClosed ? r(conn.closedError) : conn.once('closed', r),
  )
  expect(err).toBeInstanceOf(SandboxError)
  expect(err!.code).toBe(code)
}

describe('protocol client', () => {
  it('runs a request with events, output and a response', async () => {
    const sock = await peer((s, req) => {
      s.write(encodeFrame(req.stream, FrameType.EVENT, 0, json({ type: 'started' })))
      s.write(
        encodeFrame(
          req.stream,
          FrameType.OUTPUT,
          0,
          encodeOutput({ fd: 1, seq: 1, timestamp: 5, data: Buffer.from('hi') }),
        ),
      )
      s.write(encodeFrame(req.stream, FrameType.RESPONSE, FLAG_END, json({ echo: req.body.op })))
    })
    const conn = await AgentConnection.connect(sock)
    const events: unknown[] = []
    const out: string[] = []
    const stream = untyped(conn).request(
      'test.stream',
      {},
      { onEvent: (e) => events.push(e), onOutput: (c) => out.push(c.data.toString()) },
    )
    await expect(stream.result).resolves.toEqual({ echo: 'test.stream' })
    expect(events).toEqual([{ type: 'started' }])
    expect(out).toEqual(['hi'])
    conn.close()
  })

  it('maps ERROR frames to SandboxErrors with the agent code', async () => {
    const sock = await peer((s, req) =>
      s.write(
        encodeFrame(
          req.stream,
          FrameType.ERROR,
          FLAG_END,
          json({ code: 'S211', message: 'not found: /nope', path: '/nope' }),
        ),
      ),
    )
    const conn = await AgentConnection.connect(sock)
    const err = await conn.call('fs.stat', { path: '/nope' }).catch((e) => e)
    expect(err).toBeInstanceOf(SandboxError)
    expect(err.code).toBe('S211')
    expect(err.details.path).toBe('/nope')
    conn.close()
  })

  // A bad frame on one stream fails that request only; the connection answers the next call.
  const violations: Array<[string, Script, string]> = [
    [
      'a frame over the size cap',
      (s, r) => {
        const h = Buffer.alloc(10)
        h.writeUInt32BE(MAX_PAYLOAD + 1)
        h.writeUInt32BE(r.stream, 4)
        h.writeUInt8(FrameType.EVENT, 8)
        s.write(h)
        s.write(Buffer.alloc(MAX_PAYLOAD + 1))
      },
      'S203',
    ],
    [
      'an unknown frame type',
      (s, r) => {
        const f = encodeFrame(r.stream, FrameType.EVENT, 0, json({}))
        f.writeUInt8(0x42, 8)
        s.write(f)
      },
      'S204',
    ],
    [
      'a response that is not JSON',
      (s, r) => s.write(encodeFrame(r.stream, FrameType.RESPONSE, FLAG_END, Buffer.from('{nope'))),
      'S204',
    ],
    ['a final frame without END', (s, r) => s.write(encodeFrame(r.stream, FrameType.RESPONSE, 0, json({}))), 'S204'],
    [
      'a truncated OUTPUT header',
      (s, r) => s.write(encodeFrame(r.stream, FrameType.OUTPUT, 0, Buffer.alloc(5))),
      'S204',
    ],
    [
      'a WINDOW of the wrong size',
      (s, r) => s.write(encodeFrame(r.stream, FrameType.WINDOW, 0, Buffer.alloc(3))),
      'S204',
    ],
    ['a REQUEST from the agent', (s, r) => s.write(encodeFrame(r.stream, FrameType.REQUEST, 0, json({}))), 'S204'],
  ]
  for (const [what, script, code] of violations) {
    it(`fails only the request that got ${what} (${code}); the connection goes on`, async () => {
      const sock = await peer((s, req) => {
        if (req.body.op === 'bad') script(s, req)
        else s.write(encodeFrame(req.stream, FrameType.RESPONSE, FLAG_END, json({ fine: true })))
      })
      const conn = await AgentConnection.connect(sock)
      const err = await untyped(conn)
        .call('bad')
        .catch((e) => e)
      expect(err).toBeInstanceOf(SandboxError)
      expect(err.code).toBe(code)
      await expect(untyped(conn).call('test.ping')).resolves.toEqual({ fine: true })
      expect(conn.isClosed).toBe(false)
      conn.close()
    })
  }

  it('drops frames for streams it never opened and junk on the control stream', async () => {
    const sock = await peer((s, req) => {
      s.write(encodeFrame(99, FrameType.RESPONSE, FLAG_END, json({})))
      s.write(encodeFrame(0, FrameType.HELLO, 0, json(HELLO)))
      s.write(encodeFrame(0, FrameType.EVENT, 0, Buffer.from('{nope')))
      s.write(encodeFrame(req.stream, FrameType.RESPONSE, FLAG_END, json({ fine: true })))
    })
    const conn = await AgentConnection.connect(sock)
    await expect(untyped(conn).call('test.ping')).resolves.toEqual({ fine: true })
    conn.close()
  })

  it('drops frames for a stream it has finished (the agent granting stdin credit after the answer), and keeps serving', async () => {
    // Issue 22: a late WINDOW for a finished command's stdin once closed the connection, so the
    // shutdown request that followed never arrived and stop() waited out its grace.
    const sock = await peer((s, req) => {
      if (req.body.op !== 'test.stream')
        return s.write(encodeFrame(req.stream, FrameType.RESPONSE, FLAG_END, json({ op: req.body.op })))
      s.write(encodeFrame(req.stream, FrameType.RESPONSE, FLAG_END, json({ done: true })))
      s.write(encodeFrame(req.stream, FrameType.WINDOW, 0, encodeWindow(1024 * 1024)))
      s.write(encodeFrame(req.stream, FrameType.WINDOW, 0, Buffer.from('bad')))
      s.write(
        encodeFrame(
          req.stream,
          FrameType.OUTPUT,
          0,
          encodeOutput({ fd: 1, seq: 9, timestamp: 0, data: Buffer.from('late') }),
        ),
      )
      s.write(encodeFrame(req.stream, FrameType.DATA, 0, Buffer.from('late')))
      s.write(encodeFrame(req.stream, FrameType.EVENT, 0, json({ type: 'late' })))
      s.write(encodeFrame(req.stream, FrameType.ERROR, FLAG_END, json({ code: 'S500', message: 'late' })))
    })
    const conn = await AgentConnection.connect(sock)
    const stream = untyped(conn).request('test.stream', { stdin: true })
    await expect(stream.result).resolves.toEqual({ done: true })
    // The host's own late end of stdin is not sent on a finished stream either.
    await stream.endData()
    await expect(untyped(conn).call('test.echo')).resolves.toEqual({ op: 'test.echo' })
    expect(conn.isClosed).toBe(false)
    expect(conn.activeStreams).toBe(0)
    conn.close()
  })

  it('rejects a call the agent never answers with S200 after its deadline, and the connection stays', async () => {
    let first = true
    const sock = await peer((s, req) => {
      if (first) first = false
      else s.write(encodeFrame(req.stream, FrameType.RESPONSE, FLAG_END, json({ fine: true })))
    })
    const conn = await AgentConnection.connect(sock)
    await expect(untyped(conn).call('test.ping', {}, { timeoutMs: 100 })).rejects.toMatchObject({ code: 'S200' })
    await expect(untyped(conn).call('test.ping')).resolves.toEqual({ fine: true })
    conn.close()
  })

  it('rejects pending requests with S205 when the peer closes in the middle of a frame', async () => {
    const sock = await peer((s) => {
      s.write(encodeFrame(1, FrameType.EVENT, 0, json({ a: 1 })).subarray(0, 12))
      s.end()
    })
    const conn = await AgentConnection.connect(sock)
    const err = await untyped(conn)
      .call('test.ping')
      .catch((e) => e)
    expect(err.code).toBe('S205')
    expect(err.message).toContain('middle of a frame')
    await expectClosedWith(conn, 'S205')
    expect(
      (
        await untyped(conn)
          .call('test.ping')
          .catch((e) => e)
      ).code,
    ).toBe('S205')
  })

  it('fails the request whose agent sends more than the window it was granted (S204)', async () => {
    const window = 256 * 1024
    const sock = await peer((s, req) => {
      s.write(encodeFrame(req.stream, FrameType.DATA, 0, Buffer.alloc(window)))
      s.write(encodeFrame(req.stream, FrameType.DATA, 0, Buffer.alloc(1)))
    })
    const conn = await AgentConnection.connect(sock)
    let received = 0
    // manualCredit: the host grants nothing back, so the window is all the agent may send.
    const stream = conn.request(
      'fs.read',
      { path: '/f', window },
      { manualCredit: true, onData: (b) => (received += b.length) },
    )
    const err = await stream.result.catch((e) => e)
    expect(err.code).toBe('S204')
    expect(err.message).toContain('past the window')
    expect(received).toBe(window)
  })

  it('refuses an agent that chose a version the host did not offer (S201) and a malformed HELLO (S204)', async () => {
    await expect(AgentConnection.connect(await peer(() => {}, { ...HELLO, version: 9 }))).rejects.toMatchObject({
      code: 'S201',
    })
    await expect(AgentConnection.connect(await peer(() => {}, { version: 1 }))).rejects.toMatchObject({ code: 'S204' })
    await expect(AgentConnection.connect(await peer(() => {}, { ...HELLO, features: 'exec' }))).rejects.toMatchObject({
      code: 'S204',
    })
  })

  it('offers every version it speaks in its HELLO', async () => {
    let offered: Record<string, unknown> | undefined
    const dir = tempDir()
    const sock = path.join(dir, 's')
    const server = net.createServer((s) => {
      s.on('error', () => {})
      s.once('data', (chunk) => {
        offered = JSON.parse(new FrameDecoder().push(chunk)[0].payload.toString())
        s.write(encodeFrame(0, FrameType.ERROR, FLAG_END, json({ code: 'S202', message: 'agent speaks protocol [2]' })))
      })
    })
    servers.push(server)
    await new Promise<void>((r) => server.listen(sock, r))
    await expect(AgentConnection.connect(sock)).rejects.toMatchObject({ code: 'S202' })
    expect(offered).toMatchObject({ versions: [1], versionMin: 1, versionMax: 1 })
  })

  // Answers whose JSON does not fit the contract fail their request with S204; the connection goes on.
  const snapshot = {
    id: 'c1',
    argv: ['x'],
    status: 'running',
    pid: 2,
    exitCode: null,
    signal: null,
    timedOut: false,
    timeoutMs: null,
    startedAt: 1,
    endedAt: null,
    durationMs: null,
    cancelMode: null,
    canceledAt: null,
    terminationSignal: null,
    killedReason: null,
    failReason: null,
    stdoutTruncated: false,
    stderrTruncated: false,
    firstSeq: 1,
    nextSeq: 1,
    usage: null,
  }
  const misfits: Array<[string, string, Record<string, unknown>, (s: net.Socket, stream: number) => void]> = [
    [
      'a RESPONSE missing a field',
      'fs.mkdir',
      { path: '/d' },
      (s, n) => s.write(encodeFrame(n, FrameType.RESPONSE, FLAG_END, json({}))),
    ],
    [
      'a RESPONSE field of the wrong type',
      'fs.stat',
      { path: '/f' },
      (s, n) =>
        s.write(
          encodeFrame(
            n,
            FrameType.RESPONSE,
            FLAG_END,
            json({ name: 'f', isDir: 'no', isSymlink: false, size: 1, mode: 420, mtime: 1 }),
          ),
        ),
    ],
    [
      'a snapshot with an unknown status',
      'exec.get',
      { commandId: 'c1' },
      (s, n) =>
        s.write(encodeFrame(n, FrameType.RESPONSE, FLAG_END, json({ command: { ...snapshot, status: 'zombie' } }))),
    ],
    [
      'a snapshot whose usage is malformed',
      'exec.get',
      { commandId: 'c1' },
      (s, n) =>
        s.write(
          encodeFrame(n, FrameType.RESPONSE, FLAG_END, json({ command: { ...snapshot, usage: { userMs: '1' } } })),
        ),
    ],
    [
      'an array element of the wrong type',
      'exec.list',
      {},
      (s, n) => s.write(encodeFrame(n, FrameType.RESPONSE, FLAG_END, json({ commands: [snapshot, 7] }))),
    ],
    [
      'a known EVENT missing its field',
      'fs.read',
      { path: '/f' },
      (s, n) => s.write(encodeFrame(n, FrameType.EVENT, 0, json({ type: 'meta', size: 1, mode: 420 }))),
    ],
    [
      'an EVENT without a type',
      'fs.read',
      { path: '/f' },
      (s, n) => s.write(encodeFrame(n, FrameType.EVENT, 0, json({ size: 1 }))),
    ],
    [
      'an ERROR whose code is not a string',
      'fs.stat',
      { path: '/f' },
      (s, n) => s.write(encodeFrame(n, FrameType.ERROR, FLAG_END, json({ code: 211, message: 'x' }))),
    ],
  ]
  for (const [what, op, args, answer] of misfits) {
    it(`fails the request that got ${what} (S204); the connection goes on`, async () => {
      const sock = await peer((s, req) => {
        if (req.body.op === op) answer(s, req.stream)
        else s.write(encodeFrame(req.stream, FrameType.RESPONSE, FLAG_END, json({ fine: true })))
      })
      const conn = await AgentConnection.connect(sock)
      const err = await untyped(conn)
        .call(op, args)
        .catch((e) => e)
      expect(err).toBeInstanceOf(SandboxError)
      expect(err.code).toBe('S204')
      await expect(untyped(conn).call('test.ping')).resolves.toEqual({ fine: true })
      conn.close()
    })
  }

  it('accepts answers that fit the contract, ignoring EVENT types and fields it does not know', async () => {
    const sock = await peer((s, req) => {
      s.write(encodeFrame(req.stream, FrameType.EVENT, 0, json({ type: 'from-a-newer-agent', anything: [1] })))
      s.write(encodeFrame(req.stream, FrameType.RESPONSE, FLAG_END, json({ command: { ...snapshot, extra: 'field' } })))
    })
    const conn = await AgentConnection.connect(sock)
    await expect(conn.call('exec.get', { commandId: 'c1' })).resolves.toMatchObject({
      command: { id: 'c1', status: 'running' },
    })
    conn.close()
  })

  it('times out a silent agent with S305 instead of hanging', async () => {
    const dir = tempDir()
    const sock = path.join(dir, 's')
    const server = net.createServer(() => {})
    servers.push(server)
    await new Promise<void>((r) => server.listen(sock, r))
    await expect(AgentConnection.connect(sock, { timeoutMs: 200 })).rejects.toMatchObject({ code: 'S305' })
  })

  it('sends upload data only within the credit the agent granted (plus the implicit initial credit)', async () => {
    let received = 0
    let granted = IMPLICIT_SEND_CREDIT
    let overrun = false
    const sock = path.join(tempDir(), 's')
    // One decoder for the whole connection: the upload's first DATA may share a read with the REQUEST.
    const server = net.createServer((s) => {
      const d = new FrameDecoder()
      s.on('data', (chunk) => {
        for (const f of d.push(chunk)) {
          if (f.type === FrameType.HELLO) s.write(encodeFrame(0, FrameType.HELLO, 0, json(HELLO)))
          else if (f.type === FrameType.REQUEST) {
            granted += 1000
            s.write(encodeFrame(f.stream, FrameType.WINDOW, 0, encodeWindow(1000)))
          } else if (f.type === FrameType.DATA) {
            received += f.payload.length
            if (received > granted) overrun = true
            if (f.flags & FLAG_END)
              s.write(encodeFrame(f.stream, FrameType.RESPONSE, FLAG_END, json({ bytes: received })))
            else {
              granted += f.payload.length
              s.write(encodeFrame(f.stream, FrameType.WINDOW, 0, encodeWindow(f.payload.length)))
            }
          }
        }
      })
    })
    servers.push(server)
    await new Promise<void>((r) => server.listen(sock, r))
    const conn = await AgentConnection.connect(sock)
    const stream = conn.request('fs.write', { path: '/x' })
    const total = IMPLICIT_SEND_CREDIT + 10_000
    await stream.sendData(Buffer.alloc(total, 1))
    await stream.endData()
    await expect(stream.result).resolves.toEqual({ bytes: total })
    expect(overrun).toBe(false)
    conn.close()
  })

  describe('an aborted upload', () => {
    /** A peer that takes uploads and hands each CANCEL to the test, which decides when (and whether) to answer it. */
    async function uploadPeer(): Promise<{ sock: string; cancelled: Promise<{ socket: net.Socket; stream: number }> }> {
      const sock = path.join(tempDir(), 's')
      let onCancel!: (c: { socket: net.Socket; stream: number }) => void
      const cancelled = new Promise<{ socket: net.Socket; stream: number }>((r) => (onCancel = r))
      const server = net.createServer((socket) => {
        const d = new FrameDecoder()
        socket.on('error', () => {})
        socket.on('data', (chunk) => {
          for (const f of d.push(chunk)) {
            if (f.type === FrameType.HELLO) socket.write(encodeFrame(0, FrameType.HELLO, 0, json(HELLO)))
            else if (f.type === FrameType.PING) socket.write(encodeFrame(0, FrameType.PONG, 0, f.payload))
            else if (f.type === FrameType.CANCEL) onCancel({ socket, stream: f.stream })
          }
        })
      })
      servers.push(server)
      await new Promise<void>((r) => server.listen(sock, r))
      return { sock, cancelled }
    }
    const reason = () => new SandboxError('S218', '/x: upload aborted by the test')

    it("settles only once the agent has answered the CANCEL (its cleanup done), with the caller's reason", async () => {
      const { sock, cancelled } = await uploadPeer()
      const conn = await AgentConnection.connect(sock)
      const stream = conn.request('fs.write', { path: '/x' })
      await stream.sendData(Buffer.from('partial'))
      let settled = false
      stream.result.then(
        () => (settled = true),
        () => (settled = true),
      )
      stream.abortUpload(reason())
      const { socket, stream: id } = await cancelled
      // The CANCEL has arrived and a PING sent after it is answered: the result still waits for the stream's answer.
      await conn.ping()
      expect(settled).toBe(false)
      await expect(stream.sendData(Buffer.from('more'))).rejects.toMatchObject({ code: 'S218' })
      socket.write(
        encodeFrame(id, FrameType.ERROR, FLAG_END, json({ code: 'S218', message: 'stream 1 (fs.write): cancelled' })),
      )
      await expect(stream.result).rejects.toMatchObject({
        code: 'S218',
        message: expect.stringContaining('/x: upload aborted by the test'),
      })
      conn.close()
    })

    it("resolves when the agent finished the upload before the CANCEL reached it, and reports another failure as the agent's own", async () => {
      const { sock, cancelled } = await uploadPeer()
      const conn = await AgentConnection.connect(sock)
      const done = conn.request('fs.write', { path: '/x' })
      done.abortUpload(reason())
      const first = await cancelled
      first.socket.write(encodeFrame(first.stream, FrameType.RESPONSE, FLAG_END, json({ bytes: 7 })))
      await expect(done.result).resolves.toEqual({ bytes: 7 })
      const failed = conn.request('fs.write', { path: '/x' })
      failed.abortUpload(reason())
      first.socket.write(
        encodeFrame(failed.id, FrameType.ERROR, FLAG_END, json({ code: 'S212', message: '/x: not a directory' })),
      )
      await expect(failed.result).rejects.toMatchObject({ code: 'S212' })
      conn.close()
    })

    it(`rejects with the caller's reason after ${UPLOAD_ABORT_ANSWER_MS} ms when the agent never answers`, async () => {
      const { sock, cancelled } = await uploadPeer()
      const conn = await AgentConnection.connect(sock)
      vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout'] })
      try {
        const stream = conn.request('fs.write', { path: '/x' })
        stream.abortUpload(reason())
        await cancelled
        let settled = false
        stream.result.catch(() => (settled = true))
        await vi.advanceTimersByTimeAsync(UPLOAD_ABORT_ANSWER_MS - 1)
        expect(settled).toBe(false)
        await vi.advanceTimersByTimeAsync(1)
        await expect(stream.result).rejects.toMatchObject({
          code: 'S218',
          message: expect.stringContaining('/x: upload aborted by the test'),
        })
        expect(conn.activeStreams).toBe(0)
      } finally {
        vi.useRealTimers()
        conn.close()
      }
    })
  })
})
