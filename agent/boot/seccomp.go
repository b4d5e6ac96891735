package boot

// The seccomp filter every command runs under, in the spirit of Docker's
// default profile: the calls that reach the host kernel's global state
// (modules, kexec, keyrings, clocks, swap, accounting), the ones whose attack
// surface has been a steady source of kernel bugs (bpf, perf_event_open,
// userfaultfd, io_uring, open_by_handle_at) and every way to make or enter a
// namespace or change the mount tree are refused with EPERM (a program sees a
// plain "Operation not permitted", nothing is killed). clone3 answers ENOSYS,
// because a filter cannot read its flags (they sit behind a pointer) and libc
// falls back to clone, whose flags are checked. Allowed and why: ptrace (the
// pid namespace hides every process outside the sandbox, the agent is not
// dumpable, and debuggers in the sandbox keep working).
//
// The agent installs it on itself, on all threads (TSYNC), after dropping its
// capabilities and before it serves: every command inherits it through fork
// and exec, and no_new_privs (set here, for every thread with the filter)
// lets an unprivileged process install it and keeps it from ever being lifted.

import (
	"fmt"
	"runtime"
	"syscall"
	"unsafe"
)

const (
	seccompSetModeFilter   = 1
	seccompFilterFlagTsync = 1

	seccompRetAllow = 0x7fff0000
	seccompRetErrno = 0x00050000

	// Offsets in struct seccomp_data {int nr; u32 arch; u64 ip; u64 args[6]}.
	// Both supported architectures are little-endian: the low word of args[0]
	// comes first.
	seccompDataNr   = 0
	seccompDataArch = 4
	seccompDataArg0 = 16

	bpfLdW  = syscall.BPF_LD | syscall.BPF_W | syscall.BPF_ABS
	bpfJeq  = syscall.BPF_JMP | syscall.BPF_JEQ | syscall.BPF_K
	bpfJge  = syscall.BPF_JMP | syscall.BPF_JGE | syscall.BPF_K
	bpfJset = syscall.BPF_JMP | syscall.BPF_JSET | syscall.BPF_K
	bpfJa   = syscall.BPF_JMP | syscall.BPF_JA
	bpfRet  = syscall.BPF_RET | syscall.BPF_K

	// The CLONE_NEW* flags. CLONE_NEWTIME (0x80) exists for unshare only: in
	// clone's flags the low byte is the exit signal.
	cloneNewFlags   = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
	unshareNewFlags = cloneNewFlags | 0x80
)

// personalityAllowed are the personality(2) values Docker's profile allows:
// PER_LINUX, PER_LINUX32, UNAME26 variants and the 0xffffffff query.
var personalityAllowed = []uint32{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// The deny list, by name; seccomp_<arch>.go gives the numbers.
var seccompDenied = []string{
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"open_by_handle_at", "name_to_handle_at", "bpf", "perf_event_open", "userfaultfd",
	"add_key", "request_key", "keyctl", "lookup_dcookie",
	"mount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick",
	"move_mount", "open_tree", "mount_setattr", "setns",
	"process_vm_readv", "process_vm_writev",
	"swapon", "swapoff", "reboot", "acct", "vhangup", "quotactl", "quotactl_fd", "nfsservctl",
	"settimeofday", "clock_settime", "adjtimex", "clock_adjtime", "syslog",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	// amd64 only (absent from seccompSyscalls elsewhere):
	"iopl", "ioperm", "uselib", "_sysctl", "ustat", "sysfs",
	"create_module", "get_kernel_syms", "query_module",
}

// bpfInsn is one instruction with symbolic jump targets, resolved by assemble.
type bpfInsn struct {
	code   uint16
	k      uint32
	jt, jf string // labels; "" = the next instruction
	label  string // a label naming this instruction
}

// seccompProgram builds the filter for the running architecture.
func seccompProgram() ([]syscall.SockFilter, error) {
	nr := func(name string) uint32 { return uint32(seccompSyscalls[name]) }
	p := []bpfInsn{
		{code: bpfLdW, k: seccompDataArch},
		{code: bpfJeq, k: seccompArch, jf: "foreign-arch"},
		{code: bpfLdW, k: seccompDataNr},
	}
	if seccompX32Bit != 0 {
		// x32 calls are the same kernel entry points under other numbers.
		p = append(p, bpfInsn{code: bpfJge, k: seccompX32Bit, jt: "eperm"})
	}
	for _, name := range seccompDenied {
		if _, ok := seccompSyscalls[name]; ok {
			p = append(p, bpfInsn{code: bpfJeq, k: nr(name), jt: "eperm"})
		}
	}
	p = append(p,
		bpfInsn{code: bpfJeq, k: nr("clone3"), jt: "enosys"},
		bpfInsn{code: bpfJeq, k: nr("clone"), jt: "clone"},
		bpfInsn{code: bpfJeq, k: nr("unshare"), jt: "unshare"},
		bpfInsn{code: bpfJeq, k: nr("personality"), jt: "personality"},
		bpfInsn{code: bpfJa, jt: "allow"},

		bpfInsn{code: bpfLdW, k: seccompDataArg0, label: "clone"},
		bpfInsn{code: bpfJset, k: cloneNewFlags, jt: "eperm", jf: "allow"},

		bpfInsn{code: bpfLdW, k: seccompDataArg0, label: "unshare"},
		bpfInsn{code: bpfJset, k: unshareNewFlags, jt: "eperm", jf: "allow"},

		bpfInsn{code: bpfLdW, k: seccompDataArg0, label: "personality"},
	)
	for _, v := range personalityAllowed {
		p = append(p, bpfInsn{code: bpfJeq, k: v, jt: "allow"})
	}
	p = append(p,
		bpfInsn{code: bpfRet, k: seccompRetErrno | uint32(syscall.EPERM), label: "eperm"},
		bpfInsn{code: bpfRet, k: seccompRetAllow, label: "allow"},
		bpfInsn{code: bpfRet, k: seccompRetErrno | uint32(syscall.ENOSYS), label: "enosys"},
		// Another architecture's calls (i386 through int 0x80 on amd64,
		// arm32 on arm64) would need their own numbering: none is allowed.
		bpfInsn{code: bpfRet, k: seccompRetErrno | uint32(syscall.ENOSYS), label: "foreign-arch"},
	)
	return assemble(p)
}

// assemble resolves the labels into the relative offsets classic BPF jumps use
// (forward only; an unconditional jump carries its target in k).
func assemble(p []bpfInsn) ([]syscall.SockFilter, error) {
	at := map[string]int{}
	for i, in := range p {
		if in.label != "" {
			at[in.label] = i
		}
	}
	offset := func(from int, label string) (uint8, error) {
		if label == "" {
			return 0, nil
		}
		to, ok := at[label]
		if !ok || to <= from || to-from-1 > 255 {
			return 0, fmt.Errorf("seccomp: bad jump from %d to %q", from, label)
		}
		return uint8(to - from - 1), nil
	}
	out := make([]syscall.SockFilter, len(p))
	for i, in := range p {
		jt, err := offset(i, in.jt)
		if err != nil {
			return nil, err
		}
		jf, err := offset(i, in.jf)
		if err != nil {
			return nil, err
		}
		if in.code == bpfJa {
			out[i] = syscall.SockFilter{Code: in.code, K: uint32(jt)}
			continue
		}
		out[i] = syscall.SockFilter{Code: in.code, Jt: jt, Jf: jf, K: in.k}
	}
	return out, nil
}

// installSeccomp loads the filter on every thread of the agent.
func installSeccomp() error {
	prog, err := seccompProgram()
	if err != nil {
		return err
	}
	fprog := syscall.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	// no_new_privs on this thread, then TSYNC gives it to every thread with the
	// filter (the kernel does so when the caller has it): one stop of the world
	// fewer than an AllThreadsSyscall of its own.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0); e != 0 {
		return fmt.Errorf("PR_SET_NO_NEW_PRIVS: %v", e)
	}
	_, _, e := syscall.RawSyscall(seccompSyscallNr, seccompSetModeFilter, seccompFilterFlagTsync, uintptr(unsafe.Pointer(&fprog)))
	if e != 0 {
		return fmt.Errorf("seccomp(SET_MODE_FILTER, TSYNC): %v", e)
	}
	return nil
}
