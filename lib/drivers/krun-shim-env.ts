/** The environment krun-shim runs in, for a VM's boot (krun.ts) and the host probe's library check (probe.ts) alike. */

/**
 * What krun-shim inherits from us: the loader's search path (libkrun dlopens libkrunfw), PATH,
 * RUST_LOG (libkrun's log filter), and the libkrun test double's switches (KRUN_DOUBLE_*; real
 * libkrun ignores them).
 */
export function shimEnv(): Record<string, string> {
  const env: Record<string, string> = {}
  for (const [key, value] of Object.entries(process.env)) {
    if (
      value !== undefined &&
      (key === 'PATH' || key === 'LD_LIBRARY_PATH' || key === 'RUST_LOG' || key.startsWith('KRUN_DOUBLE_'))
    )
      env[key] = value
  }
  return env
}
