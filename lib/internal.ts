import { errors } from './protocol/errors.gen.js'
/**
 * The key to the constructors of public classes that only krunbox itself makes (Sandbox,
 * Command, SandboxFs, PortSocket, PortForward). Each class declares its constructor private (the
 * d.ts shows no way to call it) and checks this key, so that plain JavaScript cannot make a
 * half-wired handle either. Never exported by lib/index.ts.
 */

export const INTERNAL: unique symbol = Symbol('krunbox.internal')

/** Throws S001 unless the caller is krunbox's own code (it holds INTERNAL). */
export function assertInternal(key: unknown, className: string, instead: string): void {
  if (key !== INTERNAL)
    throw errors.badArgument({ subject: `${className}`, problem: `has no public constructor; use ${instead}` })
}
