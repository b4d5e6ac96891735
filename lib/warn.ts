/** Process warnings krunbox gives once per process, each under the code KRUNBOX_<KEY>. */
const warned = new Set<string>()

export function warnOnce(key: string, message: string): void {
  if (warned.has(key)) return
  warned.add(key)
  process.emitWarning(message, { code: 'KRUNBOX_' + key.toUpperCase() })
}
