package boot

// Dropping privileges for good. Capabilities are per thread in Linux and the
// Go runtime runs many threads, so the capset goes through AllThreadsSyscall
// (threads created later inherit from these). What only execve reads, the
// bounding set and securebits, is set on the one thread that forks every
// command (the Spawner, workload_cgroup.go), and no_new_privs comes with the
// seccomp filter (seccomp.go): each AllThreadsSyscall stops every thread, and
// the 14 this took were 2 ms of every boot.

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"krunbox/agent/config"
)

const (
	prSetDumpable        = 4
	prCapbsetRead        = 23
	prCapbsetDrop        = 24
	prSetSecurebits      = 28
	prSetNoNewPrivs      = 38
	prCapAmbient         = 47
	prCapAmbientClearAll = 4
	linuxCapVersion3     = 0x20080522
	secbitNoroot         = 1 << 0
	secbitNorootLocked   = 1 << 1
	capChown             = 0
	capDacOverride       = 1
	capDacReadSearch     = 2
	capFowner            = 3
	capKill              = 5
	capSetgid            = 6
	capSetuid            = 7
	// What the agent keeps, in its own permitted and effective sets only: switching a
	// command to another user (exec/user.go), fs.chmod's uid/gid (fsops/chmod.go), and
	// signalling a command that runs as another user (cancel, timeouts, shutdown: without
	// CAP_KILL its kill() fails with EPERM and the command outlives them). With no
	// inheritable, ambient or bounding capability and no_new_privs, no command can get
	// them through execve.
	agentKeptCaps = 1<<capChown | 1<<capKill | 1<<capSetgid | 1<<capSetuid
	// Permitted but not effective: raised on one locked thread only while it reads the whole
	// writable layer (a snapshot, the artifacts archive), so that a 0600 file of uid 1000 is
	// kept; fs ops keep the workload root's permissions.
	agentRaisableCaps = 1 << capDacReadSearch
)

// agentSavedGid is the agent's saved set-group-ID (dropPrivileges): nogroup, a gid the sandbox's
// namespace maps and that owns nothing.
const agentSavedGid = 65534

type capHeader struct {
	version uint32
	pid     int32
}

type capData struct {
	effective, permitted, inheritable uint32
}

// agentCapSets is capset's argument for the agent's own sets: all it keeps permitted (what
// ReadingEverything raises and what commands are handed included), `effective` in effect.
func agentCapSets(effective uint32) (capHeader, [2]capData) {
	var data [2]capData
	data[0].permitted, data[0].effective = agentKeptCaps|agentRaisableCaps|commandCaps, effective
	return capHeader{version: linuxCapVersion3}, data
}

// commandCapNames are the capabilities a sandbox may give the commands that run
// as its root (the `capabilities` create option): all act on the sandbox's own
// ids only, since its user namespace maps no other.
var commandCapNames = map[string]int{"CHOWN": capChown, "DAC_OVERRIDE": capDacOverride, "FOWNER": capFowner, "SETUID": capSetuid, "SETGID": capSetgid}

// commandCaps is what root's commands hold (as ambient capabilities); 0 by default.
var commandCaps uint32

func parseCommandCaps(names []string) (uint32, error) {
	var mask uint32
	for _, n := range names {
		cp, ok := commandCapNames[n]
		if !ok {
			return 0, fmt.Errorf("capability %q cannot be given to commands", n)
		}
		mask |= 1 << cp
	}
	return mask, nil
}

// AmbientCapsFor lists the capabilities a command running with cred (nil: root)
// starts with: commandCaps for root, none for any other user.
func AmbientCapsFor(cred *syscall.Credential) []uintptr {
	if cred != nil && cred.Uid != 0 {
		return nil
	}
	var caps []uintptr
	for cp := 0; cp < 32; cp++ {
		if commandCaps&(1<<cp) != 0 {
			caps = append(caps, uintptr(cp))
		}
	}
	return caps
}

// dropPrivileges leaves the agent with agentKeptCaps, and commandCaps in its
// permitted set to hand to root's commands (the Spawner's execs are already
// limited to commandCaps: limitExec).
func dropPrivileges(c *config.Config, sp *Spawner) error {
	// Commands run as the same uid as the agent: without this they could
	// open /proc/1/fd/* (the control dir, the socket), /proc/1/environ or
	// ptrace the agent. Non-dumpable needs CAP_SYS_PTRACE for all of that.
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetDumpable, 0, 0); e != 0 {
		return fmt.Errorf("PR_SET_DUMPABLE: %v", e)
	}
	// A saved gid of its own, on every thread: the agent's three gids then differ, and Linux lets
	// only a process with the same real, effective and saved ids on both sides, or CAP_SYS_RESOURCE
	// over the sandbox's namespace (which no command gets), prlimit the agent. Commands run as its
	// uid and would otherwise lower its limits for good (raising a hard limit back takes
	// CAP_SYS_RESOURCE in the host's namespace, which even the host's root may lack), and a reused
	// pool member's next lease would inherit them. A command's execve makes its own saved gid its
	// effective one. EINVAL: the gid is not mapped (a namespace of one id).
	if err := syscall.Setresgid(-1, -1, agentSavedGid); err != nil && err != syscall.EINVAL {
		return fmt.Errorf("setresgid: %v", err)
	}
	// With no inheritable capability left, capset also empties every thread's ambient set.
	hdr, data := agentCapSets(agentKeptCaps)
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return fmt.Errorf("capset: %v", e)
	}
	return nil
}

// limitExec makes every execve of the calling thread (the Spawner, locked to it,
// before the privileges are dropped: it takes CAP_SETPCAP) start with keep at
// most: the bounding set is narrowed to it, and uid 0 gets no capability for
// being root (securebits, locked).
func limitExec(keep uint32) error {
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetSecurebits, secbitNoroot|secbitNorootLocked, 0); e != 0 {
		return fmt.Errorf("PR_SET_SECUREBITS: %v", e)
	}
	last := lastCap() // read once: it is a file
	for cp := 0; cp <= last; cp++ {
		if !inBoundingSet(cp) || (cp < 32 && keep&(1<<cp) != 0) {
			continue
		}
		if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prCapbsetDrop, uintptr(cp), 0); e != 0 && e != syscall.EINVAL {
			return fmt.Errorf("PR_CAPBSET_DROP %d: %v", cp, e)
		}
	}
	return nil
}

// inBoundingSet asks for the calling thread. An unknown capability reads as present,
// so it is dropped (or found unknown) rather than skipped.
func inBoundingSet(cp int) bool {
	r, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prCapbsetRead, uintptr(cp), 0)
	return e != 0 || r != 0
}

func lastCap() int {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return n
		}
	}
	return 63
}

// verifyPrivileges reads back every thread's capability sets and no_new_privs
// (after the seccomp filter): boot fails rather than serve with a capability
// left anywhere a command could get it. The bounding set counts on the thread
// commands are forked from (spawnerTid) only: execve alone reads it, and no
// other thread forks.
func verifyPrivileges(spawnerTid int) error {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return fmt.Errorf("verify: %v", err)
	}
	for _, t := range tasks {
		f, err := os.Open("/proc/self/task/" + t.Name() + "/status")
		if err != nil {
			continue // the thread exited
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Text()
			for _, k := range []string{"CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"} {
				if strings.HasPrefix(line, k) {
					v := strings.TrimSpace(strings.TrimPrefix(line, k))
					allowed := uint64(0)
					switch k {
					case "CapPrm:":
						allowed = agentKeptCaps | agentRaisableCaps | uint64(commandCaps)
					case "CapEff:":
						allowed = agentKeptCaps
					case "CapBnd:":
						if t.Name() != strconv.Itoa(spawnerTid) {
							continue
						}
						allowed = uint64(commandCaps)
					}
					if n, err := strconv.ParseUint(v, 16, 64); err != nil || n&^allowed != 0 {
						f.Close()
						return fmt.Errorf("thread %s still has %s %s", t.Name(), k, v)
					}
				}
			}
			if strings.HasPrefix(line, "NoNewPrivs:") && strings.TrimSpace(strings.TrimPrefix(line, "NoNewPrivs:")) != "1" {
				f.Close()
				return fmt.Errorf("thread %s lacks no_new_privs", t.Name())
			}
		}
		f.Close()
	}
	return nil
}
