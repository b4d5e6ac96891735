/**
 * The one list of driver names. Everything that names a driver (the create option, records read
 * back from disk, user-facing validation) reads it from here; what a driver can do is on its
 * Driver object (types.ts), found by name in registry.ts.
 */
export const DRIVER_NAMES = ['namespace', 'krun'] as const
export type DriverName = (typeof DRIVER_NAMES)[number]

/** What create({ driver }) accepts: a driver by name, or 'auto' (choose.ts). */
export const DRIVER_CHOICES = ['auto', ...DRIVER_NAMES] as const
export type DriverChoice = (typeof DRIVER_CHOICES)[number]

export function isDriverName(value: unknown): value is DriverName {
  return (DRIVER_NAMES as readonly unknown[]).includes(value)
}
