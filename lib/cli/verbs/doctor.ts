/**
 * `krunbox doctor [--boot]`: what this host supports, which driver is used, what the image cache
 * holds; --boot boots microVMs and checks them.
 */
import { getDefaultRuntime } from '../../runtime.js'
import { hostProbe } from '../../probe.js'
import { ImageStore, PRESETS } from '../../images/index.js'
import { cacheReport, doctorReport, requirementsReport } from '../doctor.js'
import { doctorBoot, formatBootCheck } from '../doctor-boot.js'
import { parse, type VerbArgs } from '../args.js'

export async function doctor({ head }: VerbArgs): Promise<number> {
  const doctorOptions = parse(head, { boot: { type: 'boolean' } }, 0).values
  try {
    process.stdout.write(doctorReport(hostProbe()))
  } catch (err) {
    // Without the addon the probe cannot run; what the host lacks still can be told.
    process.stdout.write(`host probe:              unavailable: ${(err as Error).message}\n`)
  }
  process.stdout.write(requirementsReport())
  {
    const store = new ImageStore()
    process.stdout.write(cacheReport(store.cacheDir, await store.list(), Object.keys(PRESETS)))
  }
  if (!doctorOptions.boot) return 0
  return (await doctorBoot(getDefaultRuntime(), (c) => process.stdout.write(formatBootCheck(c)))) ? 0 : 1
}
