package boot

// x86_64 numbers for the seccomp filter (arch/x86/entry/syscalls/syscall_64.tbl).

const (
	seccompArch      = 0xc000003e // AUDIT_ARCH_X86_64
	seccompX32Bit    = 0x40000000 // __X32_SYSCALL_BIT
	seccompSyscallNr = 317
)

var seccompSyscalls = map[string]int{
	"kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
	"open_by_handle_at": 304, "name_to_handle_at": 303, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
	"add_key": 248, "request_key": 249, "keyctl": 250, "lookup_dcookie": 212,
	"mount": 165, "umount2": 166, "pivot_root": 155, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
	"move_mount": 429, "open_tree": 428, "mount_setattr": 442, "setns": 308,
	"process_vm_readv": 310, "process_vm_writev": 311,
	"swapon": 167, "swapoff": 168, "reboot": 169, "acct": 163, "vhangup": 153, "quotactl": 179, "quotactl_fd": 443, "nfsservctl": 180,
	"settimeofday": 164, "clock_settime": 227, "adjtimex": 159, "clock_adjtime": 305, "syslog": 103,
	"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
	"iopl": 172, "ioperm": 173, "uselib": 134, "_sysctl": 156, "ustat": 136, "sysfs": 139,
	"create_module": 174, "get_kernel_syms": 177, "query_module": 178,
	"clone": 56, "clone3": 435, "unshare": 272, "personality": 135,
}
