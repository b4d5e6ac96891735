package boot

// VM mode (libkrun): the agent is the guest's PID 1 (krun-shim passes
// KRUN_INIT_PID1=1, so libkrun's init.krun execs us instead of forking us).
// The image arrives as a virtiofs share, the host reaches us over vsock, and
// the sandbox ends with reboot(RESTART): libkrunfw's kernel has no ACPI
// power-off, so a power-off halts the guest and the VMM never exits, while
// the restart (reboot=k on the command line) ends the VMM, which exits with
// the status we set on the root share, as init.krun does.

import (
	"fmt"
	"io"
	"os"
	"syscall"
	"unsafe"

	"krunbox/agent/config"
	"krunbox/agent/protocol"
)

const (
	afVsock       = 40
	vmaddrCidAny  = 0xFFFFFFFF
	imageShareTag = protocol.ShimTagImage
	ctlShareTag   = protocol.ShimTagCtl // optional: where exit.json goes when the host shares one
	rebootRestart = 0x01234567          // LINUX_REBOOT_CMD_RESTART
	krunExitCode  = 0x7602              // libkrun's ioctl on the virtiofs root: the VMM's exit status
)

// vmRootFd is the boot root (libkrun's virtiofs root), opened before the
// pivot hides it, to hand libkrun our exit status.
var vmRootFd = -1

func rememberVMRoot() {
	if fd, err := syscall.Open("/", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0); err == nil {
		vmRootFd = fd
	}
}

type vmMode struct{}

func (vmMode) prepare(c *config.Config) error {
	mounts := []struct{ src, dst, fstype, opts string }{
		{"devtmpfs", "/dev", "devtmpfs", "mode=0755"},
		{"proc", "/proc", "proc", ""},
		{"tmpfs", scratchDir, "tmpfs", "mode=0700"},
	}
	for _, m := range mounts {
		if m.fstype == "devtmpfs" && doubleDevices() != "" {
			continue // the double's guest has its /dev already (vm_devices.go)
		}
		if err := os.MkdirAll(m.dst, 0o755); err != nil {
			return err
		}
		if err := syscall.Mount(m.src, m.dst, m.fstype, 0, m.opts); err != nil && err != syscall.EBUSY {
			return fmt.Errorf("mount %s on %s: %v", m.fstype, m.dst, err)
		}
	}
	_ = os.MkdirAll("/dev/pts", 0o755)
	_ = syscall.Mount("devpts", "/dev/pts", "devpts", syscall.MS_NOSUID|syscall.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
	if err := os.MkdirAll(c.LowerDir, 0o755); err != nil {
		return err
	}
	if err := mountShare(imageShareTag, c.LowerDir, syscall.MS_RDONLY); err != nil {
		return fmt.Errorf("mount virtiofs %q on %s: %v", imageShareTag, c.LowerDir, err)
	}
	if err := os.MkdirAll(ctlDir, 0o700); err == nil {
		_ = mountShare(ctlShareTag, ctlDir, 0) // absent share: no exit.json
	}
	return nil
}

// sockaddrVM is struct sockaddr_vm from <linux/vm_sockets.h>.
type sockaddrVM struct {
	family    uint16
	reserved1 uint16
	port      uint32
	cid       uint32
	flags     uint8
	zero      [3]uint8
}

func (vmMode) listen(c *config.Config) (Listener, error) {
	if dir := doubleDevices(); dir != "" {
		return listenStandIn(dir, c.VsockPort)
	}
	fd, err := syscall.Socket(afVsock, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socket(AF_VSOCK): %v", err)
	}
	sa := sockaddrVM{family: afVsock, port: c.VsockPort, cid: vmaddrCidAny}
	if _, _, e := syscall.Syscall(syscall.SYS_BIND, uintptr(fd), uintptr(unsafe.Pointer(&sa)), unsafe.Sizeof(sa)); e != 0 {
		syscall.Close(fd)
		return nil, fmt.Errorf("bind vsock port %d: %v", c.VsockPort, e)
	}
	if err := syscall.Listen(fd, 64); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("listen vsock: %v", err)
	}
	return vsockListener{fd}, nil
}

func (vmMode) Exit(code int) {
	if vmRootFd >= 0 {
		_, _, _ = syscall.Syscall(syscall.SYS_IOCTL, uintptr(vmRootFd), krunExitCode, uintptr(code))
	}
	syscall.Sync()
	_ = syscall.Reboot(rebootRestart)
	os.Exit(code) // only if the reboot was refused: PID 1 exiting panics the kernel, which reboots (panic=-1)
}

type vsockListener struct{ fd int }

// Accept blocks its goroutine's thread in accept4; connections are made
// non-blocking so os.File serves them through the runtime poller.
func (v vsockListener) Accept() (io.ReadWriteCloser, error) {
	for {
		nfd, _, e := syscall.Syscall6(syscall.SYS_ACCEPT4, uintptr(v.fd), 0, 0, syscall.SOCK_CLOEXEC|syscall.SOCK_NONBLOCK, 0, 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return nil, e
		}
		return os.NewFile(nfd, "vsock"), nil
	}
}

func (v vsockListener) Close() error { return syscall.Close(v.fd) }
