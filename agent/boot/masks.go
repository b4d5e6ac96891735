package boot

// The kernel surface the workload sees, as hardened container runtimes shape
// it: the parts of /proc that reach the whole host are read-only or masked,
// and /sys is read-only. Read-only is a mount flag, so it holds even when the
// sandbox's uid 0 owns the files (sandbox root mapped to host root): plain
// owner permission is what let a workload write /proc/sys/kernel/core_pattern.
// The workload cannot undo any of it: it has no capability and the seccomp
// filter refuses every mount call.

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// procReadOnly are /proc entries that write to the host kernel's global state.
var procReadOnly = []string{"sys", "sysrq-trigger", "irq", "bus", "fs"}

// procMasked are /proc entries that leak host memory, keys or timing; files are
// covered by /dev/null, directories by an empty read-only tmpfs.
var procMasked = []string{
	"kcore", "keys", "key-users", "timer_list", "sched_debug", "latency_stats",
	"kallsyms", "kpagecount", "kpageflags", "kpagecgroup", "mtrr",
	"acpi", "scsi", "asound", "driver",
}

// sysMasked are /sys entries masked the same way when a real sysfs is mounted.
var sysMasked = []string{"firmware", "kernel/security", "kernel/debug", "devices/virtual/powercap"}

// mountFlagsOf maps the statfs flags of a mount to the mount flags a remount
// must keep: the ones inherited from a more privileged namespace are locked,
// and a remount that drops them is refused.
func mountFlagsOf(path string) (uintptr, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return 0, err
	}
	const (
		stNosuid     = 0x2
		stNodev      = 0x4
		stNoexec     = 0x8
		stNoatime    = 0x400
		stNodiratime = 0x800
		stRelatime   = 0x1000
	)
	pairs := []struct{ st, ms int64 }{
		{stNosuid, syscall.MS_NOSUID}, {stNodev, syscall.MS_NODEV}, {stNoexec, syscall.MS_NOEXEC},
		{stNoatime, syscall.MS_NOATIME}, {stNodiratime, syscall.MS_NODIRATIME}, {stRelatime, syscall.MS_RELATIME},
	}
	var flags uintptr
	for _, p := range pairs {
		if int64(st.Flags)&p.st != 0 {
			flags |= uintptr(p.ms)
		}
	}
	return flags, nil
}

// bindReadOnly makes path a read-only bind of itself (recursively), keeping
// the flags it already has. A missing path is fine: the kernel lacks it.
func bindReadOnly(path string) error {
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err := syscall.Mount(path, path, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %v", path, err)
	}
	keep, err := mountFlagsOf(path)
	if err != nil {
		return err
	}
	flags := syscall.MS_BIND | syscall.MS_REMOUNT | syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC | keep
	if err := syscall.Mount("", path, "", flags, ""); err != nil {
		return fmt.Errorf("remount %s read-only: %v", path, err)
	}
	return nil
}

// mask hides path: /dev/null over a file, an empty read-only tmpfs over a
// directory. A missing path is fine.
func mask(path, devNull string) error {
	st, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if st.IsDir() {
		const flags = syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC
		if err := syscall.Mount("tmpfs", path, "tmpfs", flags, "size=4k,mode=0555"); err != nil {
			return fmt.Errorf("mask %s: %v", path, err)
		}
		return nil
	}
	if err := syscall.Mount(devNull, path, "", syscall.MS_BIND, ""); err != nil {
		return fmt.Errorf("mask %s: %v", path, err)
	}
	return nil
}

// hardenProc runs once the sandbox's /proc and /dev are mounted under root.
func hardenProc(root string) error {
	proc, devNull := root+"/proc", root+"/dev/null"
	for _, name := range procMasked {
		if err := mask(proc+"/"+name, devNull); err != nil {
			return err
		}
	}
	for _, name := range procReadOnly {
		if err := bindReadOnly(proc + "/" + name); err != nil {
			return err
		}
	}
	return nil
}

// mountSys puts a fresh read-only sysfs at /sys where it may (in a VM; the
// kernel allows one in a user namespace only beside a sysfs mount it can see
// whole, which bwrap's new root never has: that refusal took 0.9 ms of every
// namespace boot), else an empty read-only tmpfs.
func mountSys(root string, freshSysfs bool) error {
	sys, err := mountPoint("/sys", 0o555)
	if err != nil {
		return err
	}
	const flags = syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC
	if freshSysfs && syscall.Mount("sysfs", sys, "sysfs", flags, "") == nil {
		for _, name := range sysMasked {
			if err := mask(sys+"/"+name, root+"/dev/null"); err != nil {
				return err
			}
		}
		return nil
	}
	if err := syscall.Mount("tmpfs", sys, "tmpfs", flags, "size=4k,mode=0555"); err != nil {
		return fmt.Errorf("mount an empty /sys: %v", err)
	}
	return nil
}
