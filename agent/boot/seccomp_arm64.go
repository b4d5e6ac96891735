package boot

// arm64 numbers for the seccomp filter (include/uapi/asm-generic/unistd.h).

const (
	seccompArch      = 0xc00000b7 // AUDIT_ARCH_AARCH64
	seccompX32Bit    = 0          // no x32-like second numbering
	seccompSyscallNr = 277
)

var seccompSyscalls = map[string]int{
	"kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
	"open_by_handle_at": 265, "name_to_handle_at": 264, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
	"add_key": 217, "request_key": 218, "keyctl": 219, "lookup_dcookie": 18,
	"mount": 40, "umount2": 39, "pivot_root": 41, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
	"move_mount": 429, "open_tree": 428, "mount_setattr": 442, "setns": 268,
	"process_vm_readv": 270, "process_vm_writev": 271,
	"swapon": 224, "swapoff": 225, "reboot": 142, "acct": 89, "vhangup": 58, "quotactl": 60, "quotactl_fd": 443, "nfsservctl": 42,
	"settimeofday": 170, "clock_settime": 112, "adjtimex": 171, "clock_adjtime": 266, "syslog": 116,
	"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
	"clone": 220, "clone3": 435, "unshare": 97, "personality": 92,
}
