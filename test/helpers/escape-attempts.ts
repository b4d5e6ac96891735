/**
 * Escape attempts made from inside a sandbox with its own shell, shared by the escape suite run
 * as root (test/integration/escape.test.ts) and as an unprivileged host user (the same cases
 * through test/fixtures/escape-child.ts). Each names what it tries and says from the command's
 * output whether the sandbox held.
 */
export interface ShellAttempt {
  name: string
  /** A busybox sh script; `$MARKER` is a host path that must never come to exist. */
  script: string
  held(stdout: string): boolean
}

export const SHELL_ATTEMPTS: ShellAttempt[] = [
  {
    name: 'write every writable-looking file under /proc/sys and /sys',
    script: `n=0; for f in $(find /proc/sys /sys -type f -perm -200 2>/dev/null); do
      n=$((n+1)); v=; read -r v < "$f" 2>/dev/null
      if { printf '%s\\n' "$v" > "$f"; } 2>/dev/null; then echo "WROTE $f"; fi
    done; echo "tried $n"`,
    held: (out) => !out.includes('WROTE') && Number(/tried (\d+)/.exec(out)?.[1]) > 100,
  },
  {
    name: 'set core_pattern to a sandbox program, then crash',
    script: `printf '#!/bin/sh\\ntouch "$MARKER"\\n' > /tmp/pwn; chmod +x /tmp/pwn
      echo '|/proc/%P/root/tmp/pwn' > /proc/sys/kernel/core_pattern; echo "status $?"
      sh -c 'kill -SEGV $$'; cat /proc/sys/kernel/core_pattern`,
    held: (out) => out.includes('status 1') && !out.includes('/tmp/pwn'),
  },
  {
    name: 'write /proc/sysrq-trigger; read kcore, keys, timer_list, sched_debug, kallsyms',
    script: `(echo h > /proc/sysrq-trigger) 2>/dev/null && echo WROTE-SYSRQ
      for f in kcore keys key-users timer_list sched_debug kallsyms; do printf '%s=' $f; cat /proc/$f 2>/dev/null | wc -c; done`,
    held: (out) =>
      !out.includes('WROTE') &&
      out
        .trim()
        .split('\n')
        .every((line) => /=\s*0$/.test(line)),
  },
  {
    name: 'mount a filesystem, unshare a user or mount namespace',
    script:
      'mkdir -p /tmp/m; mount -t tmpfs none /tmp/m && echo MOUNTED; unshare -U true && echo USERNS; unshare -m true && echo MOUNTNS; unshare -r true && echo ROOTNS; echo end',
    held: (out) => out === 'end\n',
  },
  {
    name: 'see a host process',
    script: 'for p in /proc/[0-9]*; do tr "\\0" " " < $p/cmdline; echo; done',
    held: (out) => !/node|vitest|bwrap/.test(out) && out.trim().split('\n').length < 10,
  },
]

/** Paths through which an fs op could reach the control or state directory if it followed links. */
export const PATHS_TOWARD_HOST_STATE = [
  ...Array.from({ length: 16 }, (_, n) => `/proc/1/fd/${n}/state.json`),
  ...Array.from({ length: 16 }, (_, n) => `/proc/1/fd/${n}/activity.json`),
  '/proc/self/root/workspace/x',
  '/proc/1/root/workspace/x',
  '/proc/1/cwd/x',
  '/proc/self/cwd/x',
  '/workspace/../proc/1/fd/7/state.json',
]
