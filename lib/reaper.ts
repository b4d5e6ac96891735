/**
 * The reaper: a tiny shell process per sandbox that outlives the host process, waits for the
 * sandbox process to end (TTL, idle timeout, crash, or the host's death taking it along), then
 * removes what the sandbox had on the host: its cgroups, its state entry (keeping a history line
 * with the reason the agent recorded, else `crashed`, or `host_exit` when the host died first).
 *
 * Without it, a sandbox that ends with no krunbox process around (a detached one, or one whose
 * host was SIGKILLed) leaves its state directory and cgroups until some later Runtime sweeps.
 * It costs ~0.4 MiB PSS (dash, timeout, tail; see bench/reaper.ts) and no CPU while it waits. When the host
 * ends a sandbox itself, the reaper finds the entry gone and just exits.
 *
 * Its parameters come in a file of the state directory named by a random token, written before
 * it starts: its command line and environment never name the sandbox (nothing mistakes it for
 * a part of the sandbox), and a host that exits right after create() cannot cut them short.
 */
import crypto from 'node:crypto'
import fsp from 'node:fs/promises'
import path from 'node:path'
import { loadNative } from './native.js'

export interface ReaperSpec {
  stateRoot: string
  id: string
  /** The sandbox process (bwrap or krun-shim) and its start time (field 22 of /proc/pid/stat). */
  pid: number
  pidStartTime: string
  /** The host process whose death ends an attached sandbox (the reason is then host_exit). */
  ownerPid: number | null
  cgroupDirs: string[]
  history: { name: string | null; image: string; createdAt: number; metadata?: Record<string, string>; artifactsTo?: string }
  /** Copied out of the control dir before it is removed (lib/artifacts.ts has the same steps). */
  artifacts?: { to: string; maxBytes: number }
}

// $1 is the parameter file: root, id, pid, start, owner pid (or empty), history prefix, the
// artifacts' directory and byte cap (both empty without artifacts), the cgroup dirs one per line, then "end". Anything malformed or cut short: exit, touching nothing.
// (%{ stands for ${, which a template literal would take for its own.)
const SCRIPT = `
params=$1
{
  read -r root; read -r id; read -r pid; read -r start; read -r owner; read -r prefix
  read -r art_to; read -r art_max
  set --
  complete=""
  while read -r cg; do
    [ "$cg" = end ] && { complete=1; break; }
    set -- "$@" "$cg"
  done
} < "$params" || exit 0
rm -f "$params"
[ -n "$complete" ] || exit 0
case $root in /*) ;; *) exit 0 ;; esac
case $id in ????????-????-????-????-????????????) ;; *) exit 0 ;; esac
case $id in *[!0-9a-f-]*) exit 0 ;; esac
case $pid in ''|*[!0-9]*) exit 0 ;; esac
case $start in ''|*[!0-9]*) exit 0 ;; esac
case $owner in *[!0-9]*) exit 0 ;; esac
case $art_max in *[!0-9]*) exit 0 ;; esac
case $art_to in ''|/*) ;; *) exit 0 ;; esac
# alive PID [START]: the process runs (not a zombie) and, when given, has that start time.
alive() {
  want=$2
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=%{s##*) }
  set -- $s
  [ "$1" != Z ] && [ "$1" != X ] && { [ -z "$want" ] || [ "%{20}" = "$want" ]; }
}
stat_of() { s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; s=%{s##*) }; set -- $s; echo "%{20}"; }
owner_start=""
[ -n "$owner" ] && owner_start=$(stat_of "$owner")
# tail --pid returns as soon as the process is gone; a zombie nobody reaps (some containers' PID 1)
# still looks alive to it, so it is asked again every minute (alive() counts a zombie as gone).
# Where timeout or tail --pid is missing (they fail at once), it polls every second instead.
# A sandbox with artifacts does not die with its owner: once the owner is gone, the reaper asks
# the agent (a file in its control dir, polled every second) to shut down and archive them, and
# kills the sandbox if it has not ended 30 s later.
if [ -n "$owner" ] && [ -n "$art_to" ]; then
  waited=0
  while alive "$pid" "$start"; do
    if [ $waited -eq 0 ] && ! alive "$owner" "$owner_start"; then
      : > "$root/$id/ctl/host-exit" 2>/dev/null
      waited=1
    elif [ $waited -gt 0 ]; then
      waited=$((waited + 1))
      [ $waited -gt 30 ] && kill -9 "$pid" 2>/dev/null
    fi
    sleep 1
  done
fi
while alive "$pid" "$start"; do
  timeout 60 tail --pid="$pid" -f /dev/null 2>/dev/null
  rc=$?
  [ $rc -eq 0 ] || [ $rc -eq 124 ] || sleep 1
done
# find over a tree named on find's stdin where it can (findutils 4.9): no process but the
# sandbox's own then names the sandbox on its command line (tests look for leftovers that way).
find -files0-from /dev/null -prune 2>/dev/null && files0=1 || files0=""
in_tree() {
  d=$1
  shift
  if [ -n "$files0" ]; then printf '%s\\0' "$d" | find -files0-from - "$@"; else find "$d" "$@"; fi
}
for cg in "$@"; do
  [ -d "$cg" ] || continue
  for procs in $(in_tree "$cg" -name cgroup.procs 2>/dev/null); do
    while read -r p; do kill -9 "$p" 2>/dev/null; done < "$procs"
  done
  n=0
  while [ -d "$cg" ] && [ $n -lt 100 ]; do
    in_tree "$cg" -depth -type d -delete 2>/dev/null
    [ -d "$cg" ] && sleep 0.05
    n=$((n + 1))
  done
done
dir="$root/$id"
[ -d "$dir" ] || exit 0
reason=crashed
if [ -n "$owner" ] && ! alive "$owner" "$owner_start"; then reason=host_exit; fi
exitfile="$dir/ctl/exit.json"
if [ -f "$exitfile" ] && [ ! -h "$exitfile" ]; then
  case $(head -c 65536 "$exitfile") in
    *'"reason":"ttl_expired"'*) reason=ttl_expired ;;
    *'"reason":"idle_expired"'*) reason=idle_expired ;;
    *'"reason":"user_killed"'*) reason=user_killed ;;
    *'"reason":"host_exit"'*) reason=host_exit ;;
  esac
fi
# Artifacts: the agent's archive and manifest, copied (capped, never through a link) via temp names
# of this process's own (a host retiring the sandbox at the same time copies them too).
# No archive and no exit.json: the sandbox was killed before its shutdown could archive (S205),
# or the host removed them already, having copied them: so S205 never replaces a manifest (ln).
copy_out() {
  [ -f "$1" ] && [ ! -h "$1" ] || return 1
  { head -c "$3" "$1" > "$art_to/.$id.$2.$$.tmp" && mv -f "$art_to/.$id.$2.$$.tmp" "$art_to/$id.$2"; } || { rm -f "$art_to/.$id.$2.$$.tmp"; return 1; }
}
if [ -n "$art_to" ] && [ -d "$art_to" ]; then
  if copy_out "$dir/ctl/artifacts.tar" tar "$art_max"; then
    copy_out "$dir/ctl/artifacts.json" json 1048576
  elif [ ! -f "$exitfile" ]; then
    printf '{"files":[],"bytes":0,"truncated":false,"error":"S205","message":"the sandbox ended without archiving its artifacts (killed before its shutdown ran)"}' > "$art_to/.$id.json.$$.tmp" &&
      ln "$art_to/.$id.json.$$.tmp" "$art_to/$id.json" 2>/dev/null
    rm -f "$art_to/.$id.json.$$.tmp"
  fi
fi
# A host retiring the sandbox at the same time knows the reason better: its line is never replaced (ln).
printf '%s,"endedAt":%s000,"reason":"%s"}' "$prefix" "$(date +%s)" "$reason" > "$root/.history/.$id.$$.tmp" &&
  ln "$root/.history/.$id.$$.tmp" "$root/.history/$id.json" 2>/dev/null
rm -f "$root/.history/.$id.$$.tmp"
# find, as above: no process names the sandbox while its directory goes either.
in_tree "$dir" -depth -delete 2>/dev/null
`.replaceAll('%{', '${')

/**
 * Starts the reaper of one sandbox; never rejects (without it, the next Runtime's sweep cleans
 * up). It forks on the libuv pool (native spawnAsync): child_process.spawn forks on the main
 * thread and waits there for the exec, a stall of every create (issue 22).
 */
export async function spawnReaper(spec: ReaperSpec): Promise<void> {
  const lines = [
    spec.stateRoot,
    spec.id,
    String(spec.pid),
    spec.pidStartTime,
    spec.ownerPid === null ? '' : String(spec.ownerPid),
    JSON.stringify({ id: spec.id, ...spec.history }).slice(0, -1),
    spec.artifacts?.to ?? '',
    spec.artifacts ? String(spec.artifacts.maxBytes + 64 * 1024 * 1024) : '',
    ...spec.cgroupDirs,
    'end',
  ]
  if (lines.some((l) => l.includes('\n')) || !path.isAbsolute(spec.stateRoot)) return
  const params = path.join(spec.stateRoot, `.reaper-${crypto.randomBytes(8).toString('hex')}`)
  try {
    await fsp.writeFile(params, lines.join('\n') + '\n', { mode: 0o600, flag: 'wx' })
    const native = loadNative()
    const child = await native.spawnAsync({ file: '/bin/sh', args: ['-c', SCRIPT, 'krunbox-reaper', params], env: ['PATH=/usr/sbin:/usr/bin:/sbin:/bin'], newSession: true })
    // Reaped when it ends before this process does (else it would stay a zombie); never keeps us alive.
    native.watchExit(child.pid, () => {}, { ref: false })
  } catch {
    await fsp.rm(params, { force: true })
  }
}
