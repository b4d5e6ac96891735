/**
 * sb.extendTtl() moves a sandbox's deadline. The cap is fixed by the host at boot
 * (creation + the creating runtime's maxTtlMs, in the agent's configuration), and the agent
 * holds every extension to it, so neither a client holding the access token (a runtime with a
 * larger maxTtlMs, or one speaking the protocol directly) nor root inside the sandbox (which
 * cannot reach the agent's socket at all) gives the sandbox a longer life than that.
 * (Issue 31.)
 */
import { afterAll, describe, expect, it } from 'vitest'
import { SandboxError } from '../../lib/errors.js'
import { AgentConnection } from '../../lib/protocol/client.js'
import { runtimeState, type SandboxCapability } from '../../lib/runtime.js'
import { testRuntime } from '../helpers/runtime.js'

const MAX_TTL_MS = 60_000
const creator = testRuntime({ maxTtlMs: MAX_TTL_MS })
afterAll(() => creator.close())

async function codeOf(p: Promise<unknown>): Promise<string> {
  try {
    await p
  } catch (e) {
    expect(e).toBeInstanceOf(SandboxError)
    return (e as SandboxError).code
  }
  return 'accepted'
}

// Root in the sandbox looks for any unix socket it can reach (the agent's path as the host
// knows it, through the agent's /proc entries, every socket on its filesystem and every abstract
// one in its network namespace), connects to each and asks for ten more years of life.
const ROOT_ATTACK = String.raw`
import json, os, socket, struct
cands = ['/krunbox/ctl/agent.sock', '/proc/1/root/krunbox/ctl/agent.sock', '/proc/1/cwd/krunbox/ctl/agent.sock', '/proc/self/root/krunbox/ctl/agent.sock']
for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
    cands.append('/proc/%s/root/krunbox/ctl/agent.sock' % pid)
for top, dirs, files in os.walk('/', onerror=lambda e: None):
    # /usr is the image's read-only tree (walking it takes longer than the test allows on a loaded host).
    if top.startswith(('/proc', '/sys', '/usr')):
        dirs[:] = []
        continue
    for f in files:
        p = os.path.join(top, f)
        try:
            if (os.lstat(p).st_mode & 0o170000) == 0o140000:
                cands.append(p)
        except OSError:
            pass
for line in open('/proc/net/unix').read().splitlines()[1:]:
    parts = line.split()
    if len(parts) >= 8:
        cands.append('\0' + parts[7][1:] if parts[7].startswith('@') else parts[7])
def frame(stream, ftype, flags, body):
    b = json.dumps(body).encode()
    return struct.pack('>IIBB', len(b), stream, ftype, flags) + b
out = {'tried': len(cands), 'connected': [], 'answers': []}
for c in cands:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    try:
        s.connect(c)
    except OSError:
        continue
    out['connected'].append(c)
    try:
        s.sendall(frame(0, 1, 0, {'versions': [1]}) + frame(1, 2, 1, {'op': 'sandbox.setLifetime', 'extendByMs': 10 * 365 * 86400000}))
        out['answers'].append(s.recv(65536).hex())
    except OSError as e:
        out['answers'].append(str(e))
print(json.dumps(out))
`

describe('lifetime: who may extend a sandbox', () => {
  it('lifetime: a client with the token asking the agent directly for a deadline past the boot cap is refused', async () => {
    const sb = await creator.create({ ttlMs: 30_000 })
    const before = sb.expiresAt!
    const socket = runtimeState(creator).openControlSocket(sb.id)
    let raw: AgentConnection
    try {
      raw = await AgentConnection.connect(socket.path, { token: sb.accessToken! })
    } finally {
      socket.close()
    }
    try {
      // Past the cap by one ms, by ten years, and by so much that the sum would overflow an int64.
      for (const extendByMs of [MAX_TTL_MS - 30_000 + 1_000, 10 * 365 * 86_400_000, 2 ** 62]) {
        expect(await codeOf(raw.call('sandbox.setLifetime', { extendByMs })), `extendByMs ${extendByMs}`).toBe('S402')
      }
      expect(await codeOf(raw.call('sandbox.setLifetime', { extendByMs: -60_000 }))).toBe('S001')
      expect(await codeOf(raw.call('sandbox.setLifetime', { idleTimeoutMs: 8 * 86_400_000 }))).toBe('S402')
      expect((await sb.info()).expiresAt).toBe(before)
    } finally {
      raw.close(null)
    }
    await sb.stop()
  })

  it('lifetime: an attached client whose runtime allows a longer maxTtlMs extending past the creator cap is refused', async () => {
    const sb = await creator.create({ ttlMs: 30_000 })
    const generous = testRuntime({ stateDir: runtimeState(creator).root, maxTtlMs: 365 * 86_400_000 })
    try {
      const attached = await generous.attach(sb.id, { accessToken: sb.accessToken! })
      expect(await codeOf(attached.extendTtl(2 * 3_600_000))).toBe('S402')
      expect(await codeOf(attached.extendTtl(MAX_TTL_MS))).toBe('S402')
      // Up to the creator's cap it is an ordinary extension.
      const { expiresAt } = await attached.extendTtl(20_000)
      expect(expiresAt).toBe(sb.expiresAt! + 20_000)
    } finally {
      // Not close(): that would remove the shared state directory.
      await sb.stop()
    }
  })

  it('lifetime: root in the sandbox reaching the agent to extend its own life is refused', async () => {
    const capabilities: SandboxCapability[] = ['CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'SETUID', 'SETGID']
    const sb = await creator.create({ image: 'python', ttlMs: 30_000, capabilities })
    const deadline = sb.expiresAt!
    const r = await sb.exec('python3', ['-c', ROOT_ATTACK], { timeoutMs: 15_000 })
    expect(r.exitCode, r.stderr).toBe(0)
    const seen = JSON.parse(r.stdout)
    expect(seen.tried).toBeGreaterThan(4)
    expect(seen.connected).toEqual([])
    // The token is nowhere the workload can read it from its environment.
    const env = await sb.exec('sh', ['-c', 'cat /proc/[0-9]*/environ 2>/dev/null | tr "\\0" "\\n"'])
    expect(env.stdout).not.toContain(sb.accessToken!)
    expect((await sb.info()).expiresAt).toBe(deadline)
    await sb.stop()
  })
})
