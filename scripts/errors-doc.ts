/** Prints ERRORS.md from the code registry (lib/errors.ts): `tsx scripts/errors-doc.ts > ERRORS.md`. */
import { ERROR_CODES } from '../lib/errors.js'

export function errorsDoc(): string {
  const rows = Object.entries(ERROR_CODES).map(([code, i]) => `| \`${code}\` | ${i.type} | ${i.retryable ? 'yes' : 'no'} | ${i.summary} |`)
  return `# krunbox error codes

Every failure is a \`SandboxError\` with a stable \`code\`, a \`type\`, \`retryable\`, a message that
names the offending value, optional \`details\` (e.g. \`path\`, \`errno\`, \`stderrTail\`) and \`cause\`.
Codes cross the native and agent boundaries as codes; programs should branch on \`code\`, never on
message text. Bands: S0xx request validation, S1xx configuration and images, S2xx execution,
protocol and filesystem, S3xx platform and boot, S4xx limits, S5xx internal.

A non-zero exit, a timeout or a signal of a command is a result, not an error.

| code | type | retryable | meaning |
|---|---|---|---|
${rows.join('\n')}
`
}

if (import.meta.url === `file://${process.argv[1]}`) process.stdout.write(errorsDoc())
