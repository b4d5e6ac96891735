package boot

// In a VM the host's cgroups hold the VMM, not the guest's processes: only the
// guest kernel can count those. So the agent makes the workload leaf itself,
// in a pids hierarchy of the guest's own. libkrunfw's kernel is built with
// CONFIG_CGROUP_PIDS (config-libkrunfw_x86_64:188, _aarch64 likewise), and
// libkrun's init mounts cgroup2 on /sys/fs/cgroup without enabling any
// controller (init/src/fs.rs), so pids is free to bind to a v1 hierarchy,
// where the spawner thread alone can join the leaf (see workload_cgroup.go).
// The hierarchy is mounted in the agent's scratch dir, which the pivot
// detaches: commands never see it, so they cannot raise the limit.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"krunbox/agent/config"
)

const guestPidsDir = scratchDir + "/pids"

// guestWorkloadLeaf mounts a pids hierarchy on dir and makes the leaf
// dir/name whose pids.max admits pidsMax commands' tasks (+1: the Spawner
// thread is itself a task of the leaf). It returns nil, nil when the kernel
// refuses the mount for lack of privilege: that only happens in a user
// namespace (the test double's guest), where RLIMIT_NPROC binds instead.
func guestWorkloadLeaf(dir, name string, pidsMax int64) (*config.WorkloadCgroup, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	flags := uintptr(syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC)
	if err := syscall.Mount("cgroup", dir, "cgroup", flags, "pids"); err != nil {
		if errors.Is(err, syscall.EPERM) {
			return nil, nil
		}
		return nil, fmt.Errorf("mount a pids cgroup hierarchy on %s: %v", dir, err)
	}
	leaf := filepath.Join(dir, name)
	if err := os.Mkdir(leaf, 0o700); err != nil && !os.IsExist(err) {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(leaf, "pids.max"), []byte(strconv.FormatInt(pidsMax+1, 10)), 0); err != nil {
		return nil, fmt.Errorf("set pids.max of %s: %v", leaf, err)
	}
	tasks, err := syscall.Open(filepath.Join(leaf, "tasks"), syscall.O_WRONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s/tasks: %v", leaf, err)
	}
	return &config.WorkloadCgroup{TasksFds: []int{tasks}, OomControlFd: config.NoOomControl}, nil
}
