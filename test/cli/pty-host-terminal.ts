/**
 * A real host terminal for the CLI: a pseudo-terminal made by python3's os.openpty (node cannot
 * allocate one) is the CLI's stdin, stdout, stderr and controlling terminal. The driver types
 * what the test sends, changes the window size, signals the CLI, and at the end reports the exit
 * code, whether the terminal's mode was restored, and any input left unread on the terminal.
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { CLI } from './helpers.js'

/** stdin lines: {"w": text} types, {"size": [rows, cols]} resizes, {"kill": "TERM"} signals the CLI. */
const DRIVER = String.raw`
import fcntl, json, os, select, signal, struct, sys, termios
master, slave = os.openpty()
fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack('HHHH', 24, 80, 0, 0))
before = termios.tcgetattr(slave)
pid = os.fork()
if pid == 0:
    os.close(master)
    os.setsid()
    fcntl.ioctl(slave, termios.TIOCSCTTY, 0)
    for fd in (0, 1, 2):
        os.dup2(slave, fd)
    os.execvp(sys.argv[1], sys.argv[1:])
out = sys.stdout.buffer
status = None
pending = b''
while status is None:
    ready, _, _ = select.select([master, 0], [], [], 0.05)
    if master in ready:
        out.write(os.read(master, 65536)); out.flush()
    if 0 in ready:
        pending += os.read(0, 65536)
        while b'\n' in pending:
            line, pending = pending.split(b'\n', 1)
            msg = json.loads(line)
            if 'w' in msg: os.write(master, msg['w'].encode())
            if 'size' in msg: fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack('HHHH', msg['size'][0], msg['size'][1], 0, 0))
            if 'kill' in msg: os.kill(pid, getattr(signal, 'SIG' + msg['kill']))
    done, st = os.waitpid(pid, os.WNOHANG)
    if done: status = st
while select.select([master], [], [], 0.2)[0]:
    data = os.read(master, 65536)
    if not data: break
    out.write(data)
after = termios.tcgetattr(slave)
code = os.waitstatus_to_exitcode(status)
os.set_blocking(slave, False)
try: left = os.read(slave, 65536)
except BlockingIOError: left = b''
out.write(('\n@@EXIT %d RESTORED %s LEFT %s\n' % (code, before == after, left.hex() or '-')).encode()); out.flush()
`

export class HostTerminal {
  readonly child: ChildProcess
  text = ''
  #waiters: Array<() => void> = []

  /** Runs `node dist/cli.js ...args` on the terminal, or `program` instead when given. */
  constructor(args: string[], env: NodeJS.ProcessEnv, program: string[] = [process.execPath, CLI]) {
    this.child = spawn('python3', ['-c', DRIVER, ...program, ...args], { env, stdio: ['pipe', 'pipe', 'inherit'] })
    this.child.stdout!.on('data', (d: Buffer) => {
      this.text += d.toString('utf8')
      for (const w of this.#waiters.splice(0)) w()
    })
    this.child.stdout!.on('end', () => {
      for (const w of this.#waiters.splice(0)) w()
    })
  }

  send(msg: Record<string, unknown>): void {
    this.child.stdin!.write(JSON.stringify(msg) + '\n')
  }

  /** Waits for pattern in what the terminal showed after `from`. */
  async until(pattern: RegExp, from = 0): Promise<RegExpMatchArray> {
    for (;;) {
      const m = this.text.slice(from).match(pattern)
      if (m) return m
      if (this.child.stdout!.readableEnded)
        throw new Error(`terminal closed without ${pattern}: ${JSON.stringify(this.text.slice(-2000))}`)
      await new Promise<void>((resolve) => this.#waiters.push(resolve))
    }
  }

  /** Types a line and waits for what it should print. */
  async type(line: string, expected: RegExp): Promise<RegExpMatchArray> {
    const mark = this.text.length
    this.send({ w: line + '\r' })
    return this.until(expected, mark)
  }

  async exit(): Promise<{ code: number; restored: boolean }> {
    const m = await this.until(/@@EXIT (-?\d+) RESTORED (True|False) LEFT (\S+)/)
    this.unreadInput = m[3] === '-' ? '' : Buffer.from(m[3], 'hex').toString('latin1')
    return { code: Number(m[1]), restored: m[2] === 'True' }
  }

  /** What was typed into the host terminal and never read, once the CLI has exited. */
  unreadInput = ''
}
