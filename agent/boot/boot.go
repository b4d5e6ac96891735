package boot

// Boot as PID 1: build the sandbox root (tmpfs upper + overlay over the
// read-only image), open the control endpoints, pivot into the new root and
// drop every capability. The namespace and VM variants differ only in how the
// image arrives and how the host connects (Mode).

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"

	"krunbox/agent/config"
)

const (
	scratchDir = "/krunbox"      // agent-private tmpfs (bwrap's --tmpfs, or ours in a VM)
	ctlDir     = "/krunbox/ctl"  // host-shared control dir
	rwDir      = "/krunbox/rw"   // writable layer (tmpfs, size-capped)
	newRootDir = "/krunbox/root" // overlay mount that becomes "/"
	bwrapProc  = "/krunbox/proc" // bwrap --proc mount; the kernel needs a visible proc to allow a new one
)

// Error is a failed boot stage, as the host reads it from stderr.
type Error struct {
	Stage string `json:"stage"`
	Error string `json:"error"`
}

// StageErr is err failing the boot at stage.
func StageErr(stage string, err error) *Error {
	return &Error{Stage: stage, Error: err.Error()}
}

// Mode is what differs between the namespace and the VM boot.
type Mode interface {
	// prepare makes the image (cfg.LowerDir) and the scratch dir available.
	prepare(c *config.Config) error
	// listen opens the endpoint the host connects to, before the pivot.
	listen(c *config.Config) (Listener, error)
	// Exit ends the sandbox after shutdown or a boot failure.
	Exit(code int)
}

// Listener is the endpoint the host connects to (a unix or vsock listener),
// reduced to what the connection server needs.
type Listener interface {
	Accept() (io.ReadWriteCloser, error)
	Close() error
}

// ModeFor is the boot the configuration asks for.
func ModeFor(c *config.Config) Mode {
	if c.Mode == "vm" {
		return vmMode{}
	}
	return namespaceMode{}
}

// Booted is what the boot opened for the agent.
type Booted struct {
	Listener   Listener
	CtlDirFd   int // the host-shared control dir, -1: none
	UpperDirFd int // the writable layer's upper dir (fsops.UpperLayer), -1: none
	Spawner    *Spawner
}

// Run runs steps 1-5 of the boot; the caller announces readiness and serves.
func Run(c *config.Config, m Mode) (*Booted, *Error) {
	b := &Booted{CtlDirFd: -1, UpperDirFd: -1}
	limitOwnMemory()
	if err := m.prepare(c); err != nil {
		return nil, StageErr("prepare", err)
	}
	// pivot_root refuses shared mounts, and nothing we mount may propagate out.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return nil, StageErr("mounts", fmt.Errorf("make / private: %v", err))
	}
	if err := mountOverlayRoot(c); err != nil {
		return nil, StageErr("overlay", err)
	}
	// Kept for sandbox.snapshot (fsops/snapshot.go): after the pivot no path leads there.
	if fd, err := syscall.Open(rwDir+"/upper", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0); err == nil {
		b.UpperDirFd = fd
	}
	if err := mountSystemDirs(c); err != nil {
		return nil, StageErr("rootfs", err)
	}
	var err error
	if b.Listener, err = m.listen(c); err != nil {
		return nil, StageErr("listen", err)
	}
	if fd, err := syscall.Open(ctlDir, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err == nil {
		b.CtlDirFd = fd
	} else if c.Mode == "namespace" {
		return nil, StageErr("ctl", fmt.Errorf("open %s: %v", ctlDir, err))
	}
	var guestLeaf *config.WorkloadCgroup
	if c.Mode == "vm" && c.PidsMax > 0 {
		// Mounted before the pivot, which then hides it (guest_pids_cgroup.go).
		if guestLeaf, err = guestWorkloadLeaf(guestPidsDir, "workload", c.PidsMax); err != nil {
			return nil, StageErr("cgroup", err)
		}
	}
	if err := pivotInto(newRootDir); err != nil {
		return nil, StageErr("pivot_root", err)
	}
	if err := MakeSandboxDirs(c); err != nil {
		return nil, StageErr("rootfs", err)
	}
	if err := writeResolvConf(c); err != nil {
		return nil, StageErr("network", err)
	}
	relay, err := listenEgress(c) // port 53 needs a capability dropped below
	if err != nil {
		return nil, StageErr("network", err)
	}
	if commandCaps, err = parseCommandCaps(c.Capabilities); err != nil {
		return nil, StageErr("capabilities", err)
	}
	b.Spawner = startSpawner(c, m, guestLeaf) // commands are born in the workload cgroup: see workload_cgroup.go
	if err := dropPrivileges(c, b.Spawner); err != nil {
		return nil, StageErr("capabilities", err)
	}
	if err := installSeccomp(); err != nil {
		return nil, StageErr("seccomp", err)
	}
	if err := verifyPrivileges(b.Spawner.tid); err != nil {
		return nil, StageErr("capabilities", err)
	}
	if relay != nil {
		relay.Serve(b.CtlDirFd)
	}
	return b, nil
}

func mountOverlayRoot(c *config.Config) error {
	if strings.ContainsAny(c.LowerDir, ",:") {
		return fmt.Errorf("lowerDir %q must not contain ',' or ':'", c.LowerDir)
	}
	if err := os.MkdirAll(rwDir, 0o755); err != nil {
		return err
	}
	opts := fmt.Sprintf("size=%dm,mode=0755", c.UpperSizeMb)
	if err := mountTmpfs(rwDir, opts); err != nil {
		return fmt.Errorf("mount tmpfs on %s (%s): %v", rwDir, opts, err)
	}
	upper, work := rwDir+"/upper", rwDir+"/work"
	for _, d := range []string{upper, work, newRootDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	lower, err := overlayLower(c)
	if err != nil {
		return err
	}
	ov := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	// Inside a user namespace overlayfs must keep its metadata in user.* xattrs.
	errUser := syscall.Mount("overlay", newRootDir, "overlay", 0, ov+",userxattr")
	if errUser == nil {
		return nil
	}
	if err := syscall.Mount("overlay", newRootDir, "overlay", 0, ov); err != nil {
		return fmt.Errorf("mount overlay (%s): %v with userxattr, %v without", ov, errUser, err)
	}
	return nil
}

// mountPoint makes sure root+name is a real directory, refusing symlinks: an
// image must not redirect our privileged mounts elsewhere.
func mountPoint(name string, mode os.FileMode) (string, error) {
	p := newRootDir + name
	st, err := os.Lstat(p)
	switch {
	case os.IsNotExist(err):
		if err := os.Mkdir(p, mode); err != nil {
			return "", err
		}
		return p, os.Chmod(p, mode)
	case err != nil:
		return "", err
	case !st.IsDir():
		return "", fmt.Errorf("the image has a non-directory at %s", name)
	}
	return p, nil
}

func mountSystemDirs(c *config.Config) error {
	proc, err := mountPoint("/proc", 0o555)
	if err != nil {
		return err
	}
	const hardened = syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC
	if err := syscall.Mount("proc", proc, "proc", hardened, ""); err != nil {
		// A fresh proc is refused unless one is already visible; fall back to
		// bwrap's own (same pid namespace).
		if errBind := syscall.Mount(bwrapProc, proc, "", syscall.MS_BIND|syscall.MS_REC, ""); errBind != nil {
			return fmt.Errorf("mount proc: %v (bind of %s: %v; the bwrap line needs --proc %s)", err, bwrapProc, errBind, bwrapProc)
		}
	}
	dev, err := mountPoint("/dev", 0o755)
	if err != nil {
		return err
	}
	if err := syscall.Mount("/dev", dev, "", syscall.MS_BIND|syscall.MS_REC, ""); err != nil {
		return fmt.Errorf("bind /dev: %v", err)
	}
	size := fmt.Sprintf("size=%dm,mode=1777", c.UpperSizeMb)
	tmp, err := mountPoint("/tmp", 0o1777)
	if err != nil {
		return err
	}
	if err := mountTmpfs(tmp, size); err != nil {
		return fmt.Errorf("mount /tmp: %v", err)
	}
	shm := dev + "/shm"
	if err := os.MkdirAll(shm, 0o1777); err != nil {
		return err
	}
	if err := mountTmpfs(shm, size); err != nil {
		return fmt.Errorf("mount /dev/shm: %v", err)
	}
	if err := hardenProc(newRootDir); err != nil {
		return err
	}
	return mountSys(newRootDir, c.Mode == "vm")
}

// mountTmpfs mounts a tmpfs with large folios where the kernel has them:
// huge=within_size lets a write use folios up to its own size (6.14+; PMD
// pages only inside i_size before that), which makes a 1 MiB write about 5x
// cheaper than page by page, while a small file still takes only its pages
// (huge=always would give every small file 2 MiB). Kernels without THP
// refuse the option, so it falls back to plain pages.
func mountTmpfs(target, opts string) error {
	const flags = syscall.MS_NOSUID | syscall.MS_NODEV
	if err := syscall.Mount("tmpfs", target, "tmpfs", flags, opts+",huge=within_size"); err == nil {
		return nil
	}
	return syscall.Mount("tmpfs", target, "tmpfs", flags, opts)
}

// pivotInto makes root the new "/" and detaches the old one, so the workload
// can no longer reach the control dir, the image path or the agent binary.
func pivotInto(root string) error {
	if err := syscall.Chdir(root); err != nil {
		return err
	}
	// pivot_root(".", ".") stacks the old root on top of the new one; the
	// lazy unmount of "." then removes it.
	if err := syscall.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %v", err)
	}
	if err := syscall.Unmount(".", syscall.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %v", err)
	}
	return syscall.Chdir("/")
}

// MakeSandboxDirs runs after the pivot, so image symlinks resolve inside the
// sandbox (at boot, and after a pooled sandbox's reset: agent/reset.go).
func MakeSandboxDirs(c *config.Config) error {
	if err := os.MkdirAll(c.Workspace, 0o777); err != nil {
		return fmt.Errorf("workspace %s: %v", c.Workspace, err)
	}
	if err := os.Chmod(c.Workspace, 0o777); err != nil {
		return fmt.Errorf("workspace %s: %v", c.Workspace, err)
	}
	if _, err := os.Lstat("/root"); os.IsNotExist(err) {
		if err := os.Mkdir("/root", 0o700); err != nil {
			return err
		}
	}
	return nil
}

// Fail reports a boot failure the way the host expects (one JSON line on
// stderr) and ends the sandbox with status 70.
func Fail(m Mode, e *Error) {
	b, _ := json.Marshal(e)
	fmt.Fprintln(os.Stderr, string(b))
	m.Exit(70)
}
