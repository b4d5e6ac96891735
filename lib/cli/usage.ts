/** The CLI's usage text (krunbox help), and one verb's part of it (krunbox <verb> --help). */
import { PORT_FORWARD_USAGE } from './verbs/port-forward.js'

export const USAGE = `usage: krunbox <command> [options]
  run <image> [--cpus N] [--memory MiB] [--timeout DUR] [--network | --allow HOST...] [-e|--env K=V]... [--json] [-- <cmd> [args...]]
      create a sandbox, run the command in it, stop it; exits with the command's code
      (without a command: an OCI image's own Entrypoint and Cmd)
  create <image> [--idle-timeout DUR] [--ttl DUR] [--name L] [--cpus N] [--memory MiB] [--network | --allow HOST...] [-e|--env K=V]... [--json]
      prints the id of a sandbox that outlives this CLI (idle timeout 5m, TTL 1h unless given);
      --json adds its access token, which Sandbox.attach(id, { accessToken }) needs
  exec <id> [--timeout DUR] [-e|--env K=V]... [--detach] [--json] -- <cmd> [args...]
      streams the command's output; --detach prints its command id (for logs) and returns
  logs <id> <commandId> [--follow] [--after-seq N]
  list [--all] [--json]         --all adds ended sandboxes with the reason they ended
  status <id> [--json]          one sandbox: status, image, age, expiry, metadata
  stop <id> [--json]            also fine once it ended by itself; --json: {"sandboxId","stopped"}
${PORT_FORWARD_USAGE}
  upload <id> <local|-> <remote> [--mode OCTAL] [--parents]     - reads stdin
  download <id> <remote> <local|->                              - writes stdout
  images [ls | pull <ref> [--always] | import <path> <name> | build [--force] [name] | rm <name|ref> | prune]
                                <ref>: an OCI reference (ghcr.io/acme/app:1.2.3, python:3.12-slim, …@sha256:…)
  doctor [--boot]               what this host supports, and which driver is used; --boot boots
                                microVMs and checks them (PASS/FAIL lines, exit 1 on a FAIL)
Durations: a bare number is seconds (300 = 5m); or 500ms, 30s, 5m, 2h, 1d. Commands have no
deadline unless --timeout is given. --network reaches any public destination, --allow HOST
(repeatable: a name, *.suffix, IP or CIDR, optional :port) only those (docs/network.md); a
created sandbox's filter runs in a process of its own until it ends. -u|--user NAME|UID[:GID] runs commands as that user
(run, create, exec; presets have \`sandbox\`, uid 1000). --json prints one JSON document on stdout instead.
Piped stdin is passed to run/exec commands; with stdin and stdout terminals (or -t, -it) the
command runs on a terminal in the sandbox: raw keys, window size and Ctrl-C go to it. -V, --version print the version.
Exit codes: the command's own, 124 on --timeout, 127 if it cannot start, 128+n on signal n,
125 on krunbox errors (printed as "krunbox: Sxxx: message"). Access tokens of created
sandboxes are kept in \${XDG_CONFIG_HOME:-~/.config}/krunbox/tokens (or set KRUNBOX_TOKEN).`

/** The usage lines of one verb (its line and the indented ones under it), else the whole usage. */
export function usageOf(verb: string | undefined): string {
  const lines = USAGE.split('\n')
  const start = lines.findIndex((l) => verb !== undefined && (l.startsWith(`  ${verb} `) || l === `  ${verb}`))
  if (start < 0) return USAGE
  let end = start + 1
  while (end < lines.length && /^ {4,}/.test(lines[end])) end++
  return [
    `usage: krunbox ${lines[start].trim()}`,
    ...lines.slice(start + 1, end),
    'krunbox help: every command, durations, exit codes and tokens',
  ].join('\n')
}
