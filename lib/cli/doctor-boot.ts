/**
 * `krunbox doctor --boot`: boots microVMs with the krun driver and checks what a first real KVM
 * host must show, one PASS/FAIL line per check. It stops at the first check it cannot get past
 * (no VM, no point going on) and always stops what it started.
 */
import crypto from 'node:crypto'
import fs from 'node:fs'
import path from 'node:path'
import { DRIVERS } from '../drivers/registry.js'
import type { Runtime } from '../runtime.js'
import { runtimeState } from '../runtime.js'
import type { Sandbox } from '../sandbox.js'

export interface BootCheck {
  name: string
  pass: boolean
  detail: string
}

const CPUS = 2
const MEMORY_MB = 512
const EXEC_OUTPUT_BYTES = 3 * 1024 * 1024
const TRANSFER_BYTES = 4 * 1024 * 1024
/** Values that cannot ride libkrun's kernel command line: they must arrive byte for byte. */
const AWKWARD_ENV = { SPACED: 'hello "vm" world', QUOTES: `it's "quoted"`, UTF: 'grüße 😀 ĳ' }

/** Runs every check, reporting each as it ends; true when all passed. */
export async function doctorBoot(rt: Runtime, report: (check: BootCheck) => void): Promise<boolean> {
  let ok = true
  const check = async (name: string, run: () => Promise<string>): Promise<boolean> => {
    try {
      report({ name, pass: true, detail: await run() })
      return true
    } catch (err) {
      ok = false
      report({ name, pass: false, detail: err instanceof Error ? err.message : String(err) })
      return false
    }
  }
  const started: Sandbox[] = []
  try {
    let sb: Sandbox | undefined
    const booted = await check('create→ready', async () => {
      const t0 = performance.now()
      sb = await rt.create({ driver: DRIVERS.krun.name, cpus: CPUS, memoryMb: MEMORY_MB, env: AWKWARD_ENV })
      started.push(sb)
      return `${Math.round(performance.now() - t0)} ms (hardware KVM target: p50 ≤ 150 ms; bench/krun-vm.ts measures it)`
    })
    if (!booted || !sb) return false
    const vm = sb
    await check('PID 1 is the agent', async () => {
      const cmdline = (await vm.exec('cat', ['/proc/1/cmdline'])).stdout.replaceAll('\0', ' ').trim()
      expect(/krunbox-agent/.test(cmdline), `/proc/1/cmdline is ${JSON.stringify(cmdline)}`)
      return cmdline
    })
    await check('vCPUs and memory', async () => {
      const [nproc, meminfo] = (await vm.exec('sh', ['-c', 'nproc; grep MemTotal /proc/meminfo'])).stdout
        .trim()
        .split('\n')
      const memMb = Number(/(\d+) kB/.exec(meminfo ?? '')?.[1] ?? 0) / 1024
      expect(Number(nproc) === CPUS, `the guest has ${nproc} vCPUs, not ${CPUS}`)
      expect(
        memMb > MEMORY_MB / 2 && memMb <= MEMORY_MB,
        `the guest has ${memMb.toFixed(0)} MiB, not about ${MEMORY_MB}`,
      )
      return `${nproc} vCPUs, ${memMb.toFixed(0)} MiB of ${MEMORY_MB}`
    })
    await check('env with spaces, quotes and non-ASCII', async () => {
      const keys = Object.keys(AWKWARD_ENV)
      const out = (await vm.exec('sh', ['-c', `printf '%s\\n' ${keys.map((k) => `"$${k}"`).join(' ')}`])).stdout
      const want = Object.values(AWKWARD_ENV).join('\n') + '\n'
      expect(out === want, `got ${JSON.stringify(out)}, want ${JSON.stringify(want)}`)
      return 'create env arrived byte for byte'
    })
    await check('3 MiB of exec output', async () => {
      const r = await vm.exec('sh', ['-c', `head -c ${EXEC_OUTPUT_BYTES} /dev/zero | tr '\\000' x`])
      expect(
        r.exitCode === 0 && r.stdout.length === EXEC_OUTPUT_BYTES && /^x*$/.test(r.stdout),
        `exit ${r.exitCode}, ${r.stdout.length} bytes`,
      )
      return `${r.stdout.length} bytes`
    })
    await check('4 MiB file, host to guest', async () => {
      const data = crypto.randomBytes(TRANSFER_BYTES)
      await vm.fs.writeFile('/workspace/doctor-in.bin', data)
      const guestSum = (await vm.exec('sha256sum', ['/workspace/doctor-in.bin'])).stdout.split(' ')[0]
      expect(guestSum === sha256(data), `the guest's sha256 is ${guestSum}, the host's ${sha256(data)}`)
      return `${TRANSFER_BYTES} bytes, sha256 matches`
    })
    await check('4 MiB file, guest to host', async () => {
      const r = await vm.exec('sh', [
        '-c',
        `head -c ${TRANSFER_BYTES} /dev/urandom > /workspace/doctor-out.bin && sha256sum /workspace/doctor-out.bin`,
      ])
      const { data } = await vm.fs.readFile('/workspace/doctor-out.bin')
      const guestSum = r.stdout.split(' ')[0]
      expect(
        data.length === TRANSFER_BYTES && sha256(data) === guestSum,
        `read ${data.length} bytes, sha256 ${sha256(data)}; the guest's ${guestSum}`,
      )
      return `${data.length} bytes, sha256 matches`
    })
    await check('stop leaves nothing', () => stopAll(rt, started))
    await check('pidsMax 8 holds a burst and survives kill -9 -1', async () => {
      const small = await rt.create({ driver: DRIVERS.krun.name, pidsMax: 8 })
      started.push(small)
      const bomb = await small.exec('sh', ['-c', 'p=; for i in $(seq 20); do sleep 30 & p="$p $!"; done; kill $p'])
      expect(bomb.exitCode !== 0, 'a shell started 20 background processes where 8 tasks are allowed')
      await small.exec('sh', ['-c', 'kill -9 -1'])
      const after = (await small.exec('echo', ['still here'])).stdout
      expect(after === 'still here\n', `after kill -9 -1 a command printed ${JSON.stringify(after)}`)
      return 'the fork burst was refused; the agent outlived kill -9 -1'
    })
    await check('stop leaves nothing', () => stopAll(rt, started))
    return ok
  } finally {
    for (const s of started) await s.stop().catch(() => {})
  }
}

/** Stops every sandbox in started (emptying it) and says what any left behind. */
async function stopAll(rt: Runtime, started: Sandbox[]): Promise<string> {
  const left: string[] = []
  for (const s of started.splice(0)) {
    const pid = runtimeState(rt).read(s.id)?.pid
    const dir = path.join(runtimeState(rt).root, s.id)
    await s.stop()
    if (pid !== undefined && (await processLingers(pid))) left.push(`process ${pid}`)
    if (fs.existsSync(dir)) left.push(dir)
  }
  expect(left.length === 0, `left behind: ${left.join(', ')}`)
  return 'no VM process, no state directory'
}

/** The lines doctor prints. */
export function formatBootCheck(c: BootCheck): string {
  return `${c.pass ? 'PASS' : 'FAIL'}  ${c.name}: ${c.detail}\n`
}

function expect(condition: boolean, why: string): void {
  if (!condition) throw new Error(why)
}

function sha256(data: Buffer): string {
  return crypto.createHash('sha256').update(data).digest('hex')
}

/** Whether pid is still there (not even a zombie) after its stop had 5 s to finish. */
async function processLingers(pid: number): Promise<boolean> {
  const deadline = Date.now() + 5000
  while (fs.existsSync(`/proc/${pid}`)) {
    if (Date.now() > deadline) return true
    await new Promise((r) => setTimeout(r, 20))
  }
  return false
}
