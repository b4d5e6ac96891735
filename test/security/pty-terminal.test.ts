/**
 * Attacks on the terminal (issue 31) from a hostile program in the sandbox, as root:
 * flooding the terminal to exhaust the host's memory, and reaching the host's own terminal
 * (TIOCSTI typing into it, which this host still allows: dev.tty.legacy_tiocsti = 1).
 */
import fs from 'node:fs'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Runtime } from '../../lib/runtime.js'
import type { Sandbox } from '../../lib/sandbox.js'
import { ensureCliBuilt, privateCliEnv } from '../cli/helpers.js'
import { HostTerminal } from '../cli/pty-host-terminal.js'
import { testRuntime } from '../helpers/runtime.js'

let rt: Runtime
let sb: Sandbox
const cli = privateCliEnv()

beforeAll(async () => {
  await ensureCliBuilt()
  rt = testRuntime()
  sb = await rt.create({ image: 'base', driver: 'namespace' })
}, 120_000)
afterAll(async () => {
  await rt.close()
  fs.rmSync(cli.home, { recursive: true, force: true })
})

/**
 * Run in the sandbox: every terminal it can open (its own, /dev/tty, /dev/console, each
 * process's descriptors through /proc) is counted; those not of the sandbox's own devpts (or,
 * for /dev/tty, not its own session's) are "foreign", and each foreign one is sent a line by
 * TIOCSTI.
 */
const TIOCSTI_ATTACK = String.raw`
import fcntl, os, struct, termios
own = os.stat('/dev/pts/ptmx').st_dev
targets = ['/dev/tty', '/dev/console', '/dev/tty0', '/dev/tty1']
for pid in os.listdir('/proc'):
    if pid.isdigit():
        try: targets += ['/proc/%s/fd/%s' % (pid, fd) for fd in os.listdir('/proc/%s/fd' % pid)]
        except OSError: pass
ttys = foreign = injected = 0
for path in targets:
    try: fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
    except OSError: continue
    try:
        if not os.isatty(fd): continue
        ttys += 1
        if os.fstat(fd).st_dev == own: continue
        # /dev/tty is the caller's controlling terminal: its own when that leads its session (0x5429: TIOCGSID).
        sid = struct.unpack('i', fcntl.ioctl(fd, 0x5429, b'\0' * 4))[0]
        if path == '/dev/tty' and sid == os.getsid(0): continue
        foreign += 1
        for ch in b'echo HOST-PWNED\n':
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([ch]))
        injected += 1
    except OSError: pass
    finally: os.close(fd)
print('ttys=%d foreign=%d injected=%d' % (ttys, foreign, injected))
`

describe('pty: hostile terminal programs', () => {
  it('pty: a 256 MiB output flood through the terminal is held (host memory stays bounded)', async () => {
    const FLOOD = 256 << 20
    const term = sb.pty('sh', ['-c', 'yes "$(head -c 4000 /dev/zero | tr "\\0" x)"'])
    const baseline = process.memoryUsage().rss
    let peak = baseline
    let received = 0
    await new Promise<void>((resolve) => {
      term.on('data', (d) => {
        received += d.length
        peak = Math.max(peak, process.memoryUsage().rss)
        if (received >= FLOOD) resolve()
      })
    })
    await term.kill('SIGKILL')
    const result = await term.wait()
    expect(result.signal).toBe('SIGKILL')
    // Retaining the flood would take 256 MiB; what flows is bounded by the stream window (the rest is garbage not yet collected).
    const grownMiB = (peak - baseline) / 2 ** 20
    console.log(`pty flood: ${received} bytes received, host RSS grew ${grownMiB.toFixed(1)} MiB at most`)
    expect(grownMiB).toBeLessThan(128)
  }, 120_000)

  it('pty: TIOCSTI into the host terminal from root in the sandbox is refused (no host terminal is reachable)', async () => {
    const t = new HostTerminal(['run', 'python', '--', 'python3', '-c', TIOCSTI_ATTACK], cli.env)
    const m = await t.until(/ttys=(\d+) foreign=(\d+) injected=(\d+)/)
    const done = await t.exit()
    expect(done.code).toBe(0)
    // The program found its own terminal, and nothing else that is one.
    expect(Number(m[1])).toBeGreaterThan(0)
    expect({ foreign: Number(m[2]), injected: Number(m[3]) }).toEqual({ foreign: 0, injected: 0 })
    // Nothing was typed into the host terminal: no input is left on it, and none was echoed back.
    expect(t.unreadInput).not.toContain('PWNED')
    expect(t.text).not.toContain('HOST-PWNED')
    expect(done.restored).toBe(true)
  }, 180_000)
})
