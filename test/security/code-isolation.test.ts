/**
 * A kernel is reachable only from inside its sandbox, and only by its own context (issue 42).
 * Its five Jupyter channels are ipc sockets (files) in a 0700 directory of the context's own uid,
 * so it listens on no TCP port for them; the one TCP listener ipykernel opens itself (its IOPub
 * pipe for forked subprocesses, on 127.0.0.1) is in the sandbox's own network namespace. Each
 * context runs as its own uid without capabilities: a cell of one context can neither connect to
 * another's sockets, read its connection file (the signing key), nor read, signal or take a
 * descriptor of its kernel process.
 */
import net from 'node:net'
import fs from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import type { CodeContext } from '../../lib/code/types.js'
import { codeImage } from '../helpers/code-image.js'
import { nodeAsNobody } from '../helpers/rootless.js'
import { testRuntime } from '../helpers/runtime.js'

let rt: Runtime
let sb: Sandbox
let victim: CodeContext
let attacker: CodeContext
/** The victim kernel's connection file, as the kernel itself reports it. */
let connectionFile: string
beforeAll(async () => {
  rt = testRuntime()
  sb = await rt.create({ image: await codeImage(rt) })
  victim = await sb.createCodeContext({ env: { SECRET_ENV: 'env-secret' } })
  attacker = await sb.createCodeContext()
  await sb.runCode('secret = "kernel-secret"', { context: victim })
  const own = await sb.runCode(
    'from ipykernel.kernelapp import IPKernelApp\nprint(IPKernelApp.instance().connection_file)',
    {
      context: victim,
    },
  )
  connectionFile = own.logs.stdout.join('').trim()
}, 600_000)
afterAll(async () => {
  await rt?.close()
})

/** TCP listeners (state 0A) of /proc/net/tcp and tcp6 text: their port and owner uid. */
function listeners(text: string): Array<{ port: number; uid: number }> {
  return text
    .split('\n')
    .map((l) => l.trim().split(/\s+/))
    .filter((f) => f[3] === '0A')
    .map((f) => ({ port: parseInt(f[1].split(':').pop()!, 16), uid: Number(f[7]) }))
}

function connectFails(port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port })
    socket.once('connect', () => {
      socket.destroy()
      resolve('connected')
    })
    socket.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? 'error'))
  })
}

describe("the kernel's ports", () => {
  it('its channels are ipc sockets in a 0700 directory of its uid; its only TCP listener is 127.0.0.1 inside the sandbox', async () => {
    const probe = await sb.runCode(
      `import json, os\nc = json.load(open(${JSON.stringify(connectionFile)}))\nd = os.stat(os.path.dirname(${JSON.stringify(connectionFile)}))\nprint(json.dumps([c["transport"], c["ip"], oct(d.st_mode & 0o777), d.st_uid]))`,
      { context: victim },
    )
    const [transport, ip, mode, uid] = JSON.parse(probe.logs.stdout.join(''))
    expect([transport, mode, uid]).toEqual(['ipc', '0o700', victim.uid])
    expect(ip.startsWith(connectionFile.slice(0, connectionFile.lastIndexOf('/') + 1))).toBe(true)

    const inside = await sb.exec('cat', ['/proc/net/tcp', '/proc/net/tcp6'])
    const own = listeners(inside.stdout).filter((l) => l.uid === victim.uid)
    // ipykernel's IOPub pipe, nothing for the five channels (tcp transport would add five).
    expect(own.length).toBeLessThanOrEqual(1)
    const all = listeners(inside.stdout)
    expect(all.length).toBeGreaterThan(0)

    // Not from the host: its loopback is another network namespace.
    const hostListening = new Set(
      listeners(fs.readFileSync('/proc/net/tcp', 'utf8') + fs.readFileSync('/proc/net/tcp6', 'utf8')).map(
        (l) => l.port,
      ),
    )
    for (const { port } of all.filter((l) => !hostListening.has(l.port)))
      expect(await connectFails(port)).toBe('ECONNREFUSED')

    // Not from another sandbox.
    const other = await rt.create({ image: sb.image })
    try {
      const tries = await other.exec('python3', [
        '-c',
        `import socket, sys\nfor p in sys.argv[1:]:\n    try:\n        socket.create_connection(("127.0.0.1", int(p)), 2); print("connected")\n    except OSError as e: print(type(e).__name__)`,
        ...all.map((l) => String(l.port)),
      ])
      expect(tries.stdout.trim().split('\n')).toEqual(all.map(() => 'ConnectionRefusedError'))
    } finally {
      await other.stop()
    }
  })

  it("not from the host's other users: the ipc sockets are beneath the sandbox's root, which nobody cannot enter", async () => {
    const hostPid = fs
      .readdirSync('/proc')
      .filter((n) => /^\d+$/.test(n))
      .find((n) => {
        try {
          return fs.readFileSync(`/proc/${n}/cmdline`, 'utf8').includes(connectionFile)
        } catch {
          return false
        }
      })
    expect(hostPid).toBeDefined()
    const socketPath = `/proc/${hostPid}/root${connectionFile.replace(/connection\.json$/, 'k-1')}`
    const attempt = await nodeAsNobody(
      `const s = require('net').connect(process.argv[1]); s.on('connect', () => { console.log('connected'); s.destroy() }); s.on('error', (e) => console.log(e.code))`,
      [socketPath],
    )
    expect(attempt.trim()).toBe('EACCES')
  })
})

/** The cell the attacker context runs against the victim: one line per attempt, "denied" or what it got. */
const ATTACK = (file: string) => `
import ctypes, json, os, socket
file = ${JSON.stringify(file)}
report = {}
def attempt(name, f):
    try:
        report[name] = "allowed: " + str(f())[:80]
    except OSError as e:
        report[name] = "denied"
pid = next(int(p) for p in os.listdir("/proc") if p.isdigit() and file.encode() in open("/proc/%s/cmdline" % p, "rb").read() and "ipykernel" in open("/proc/%s/cmdline" % p).read())
attempt("connection file", lambda: open(file).read())
attempt("directory", lambda: os.listdir(os.path.dirname(file)))
def connect_shell():
    s = socket.socket(socket.AF_UNIX)
    s.connect(file.replace("connection.json", "k-1"))
    return "connected"
attempt("shell socket", connect_shell)
attempt("environ", lambda: open("/proc/%d/environ" % pid, "rb").read())
attempt("memory", lambda: open("/proc/%d/mem" % pid, "rb").read(1))
attempt("signal", lambda: os.kill(pid, 0) or "sent")
libc = ctypes.CDLL(None, use_errno=True)
def take_fd():
    pidfd = os.pidfd_open(pid)
    fd = libc.syscall(438, pidfd, 0, 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "pidfd_getfd")
    return fd
attempt("descriptor", take_fd)
print(json.dumps(report))
`

describe("a cell cannot reach another context's state", () => {
  it("the attacker's cell is refused the victim's connection file, sockets, memory, environment, signals and descriptors", async () => {
    const run = await sb.runCode(ATTACK(connectionFile), { context: attacker })
    expect(run.error).toBeNull()
    const report = JSON.parse(run.logs.stdout.join(''))
    expect(report).toEqual({
      'connection file': 'denied',
      directory: 'denied',
      'shell socket': 'denied',
      environ: 'denied',
      memory: 'denied',
      signal: 'denied',
      descriptor: 'denied',
    })
    expect((await sb.runCode('secret', { context: victim })).text).toBe("'kernel-secret'")
    expect((await sb.runCode('secret', { context: attacker })).error?.name).toBe('NameError')
  })
})
