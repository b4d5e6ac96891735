package boot

import (
	"syscall"
	"testing"
)

// runFilter interprets the classic BPF subset the filter uses over one seccomp_data.
func runFilter(t *testing.T, prog []syscall.SockFilter, arch, nr, arg0 uint32) uint32 {
	data := map[uint32]uint32{seccompDataNr: nr, seccompDataArch: arch, seccompDataArg0: arg0}
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case bpfLdW:
			acc = data[in.K]
		case bpfJa:
			pc += int(in.K)
		case bpfJeq, bpfJge, bpfJset:
			var taken bool
			switch in.Code {
			case bpfJeq:
				taken = acc == in.K
			case bpfJge:
				taken = acc >= in.K
			default:
				taken = acc&in.K != 0
			}
			if taken {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case bpfRet:
			return in.K
		default:
			t.Fatalf("unexpected instruction %#x at %d", in.Code, pc)
		}
	}
	t.Fatal("the filter fell off its end")
	return 0
}

func TestSeccompProgram(t *testing.T) {
	prog, err := seccompProgram()
	if err != nil {
		t.Fatal(err)
	}
	eperm := uint32(seccompRetErrno | uint32(syscall.EPERM))
	enosys := uint32(seccompRetErrno | uint32(syscall.ENOSYS))
	nr := func(name string) uint32 { return uint32(seccompSyscalls[name]) }
	cases := []struct {
		what      string
		arch, nr  uint32
		arg0, ret uint32
	}{
		{"read", seccompArch, uint32(syscall.SYS_READ), 0, seccompRetAllow},
		{"openat", seccompArch, uint32(syscall.SYS_OPENAT), 0, seccompRetAllow},
		{"ptrace (pid namespace bounds it)", seccompArch, uint32(syscall.SYS_PTRACE), 0, seccompRetAllow},
		{"thread clone", seccompArch, nr("clone"), 0x3d0f00, seccompRetAllow},
		{"fork-like clone", seccompArch, nr("clone"), uint32(syscall.SIGCHLD) | 0x4000 | 0x100, seccompRetAllow},
		{"clone CLONE_NEWUSER", seccompArch, nr("clone"), 0x10000000 | uint32(syscall.SIGCHLD), eperm},
		{"clone CLONE_NEWNS", seccompArch, nr("clone"), 0x20000, eperm},
		{"clone with exit signal 0x80 bit", seccompArch, nr("clone"), 0x80 | 0x100, seccompRetAllow},
		{"clone3", seccompArch, nr("clone3"), 0, enosys},
		{"unshare CLONE_FILES", seccompArch, nr("unshare"), 0x400, seccompRetAllow},
		{"unshare CLONE_NEWUSER", seccompArch, nr("unshare"), 0x10000000, eperm},
		{"unshare CLONE_NEWTIME", seccompArch, nr("unshare"), 0x80, eperm},
		{"personality query", seccompArch, nr("personality"), 0xffffffff, seccompRetAllow},
		{"personality PER_LINUX", seccompArch, nr("personality"), 0, seccompRetAllow},
		{"personality ADDR_NO_RANDOMIZE", seccompArch, nr("personality"), 0x0040000, eperm},
		{"another architecture", 0x40000003 /* AUDIT_ARCH_I386 */, uint32(syscall.SYS_READ), 0, enosys},
	}
	for _, name := range seccompDenied {
		if n, ok := seccompSyscalls[name]; ok {
			cases = append(cases, struct {
				what      string
				arch, nr  uint32
				arg0, ret uint32
			}{name, seccompArch, uint32(n), 0, eperm})
		}
	}
	if seccompX32Bit != 0 {
		cases = append(cases, struct {
			what      string
			arch, nr  uint32
			arg0, ret uint32
		}{"x32 read", seccompArch, seccompX32Bit | 0, 0, eperm})
	}
	for _, c := range cases {
		if got := runFilter(t, prog, c.arch, c.nr, c.arg0); got != c.ret {
			t.Errorf("%s: filter returned %#x, want %#x", c.what, got, c.ret)
		}
	}
}

// Every name on the deny list has a number on amd64 (the widest list), and the
// numbers agree with package syscall where it has them.
func TestSeccompNumbersMatchPackageSyscall(t *testing.T) {
	known := map[string]uintptr{
		"mount": syscall.SYS_MOUNT, "umount2": syscall.SYS_UMOUNT2, "pivot_root": syscall.SYS_PIVOT_ROOT,
		"unshare": syscall.SYS_UNSHARE, "clone": syscall.SYS_CLONE,
		"reboot": syscall.SYS_REBOOT, "acct": syscall.SYS_ACCT, "syslog": syscall.SYS_SYSLOG,
		"personality": syscall.SYS_PERSONALITY, "add_key": syscall.SYS_ADD_KEY, "keyctl": syscall.SYS_KEYCTL,
		"kexec_load": syscall.SYS_KEXEC_LOAD, "init_module": syscall.SYS_INIT_MODULE,
	}
	for name, want := range known {
		if got, ok := seccompSyscalls[name]; !ok || uintptr(got) != want {
			t.Errorf("%s: %d, package syscall says %d", name, got, want)
		}
	}
}
