package boot

// A VM's devices as the agent meets them: virtio-fs shares by tag, the vsock
// port the host reaches, and devtmpfs. Under krunbox's libkrun TEST DOUBLE
// there is no guest kernel, so none of them exists: the double runs this
// agent in namespaces standing in for the guest and names, in
// KRUN_DOUBLE_DEVICES on the environment it builds for the guest, a directory
// holding a stand-in for each (fs/<tag>: the share's directory, bound in its
// place; vsock/<port>: where to listen, as a unix socket the double's vsock
// muxer connects to; /dev populated already). A real guest never has it:
// its environment is the kernel command line, whose three entries the host
// writes (lib/drivers/krun.ts) and no guest process can change.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

const doubleDevicesEnvVar = "KRUN_DOUBLE_DEVICES"

// doubleDevices is the test double's stand-in directory, or "" in a VM.
func doubleDevices() string { return os.Getenv(doubleDevicesEnvVar) }

// mountShare mounts the virtio-fs share tag on dir (a bind of its stand-in under the double).
func mountShare(tag, dir string, flags uintptr) error {
	standIn := doubleDevices()
	if standIn == "" {
		return syscall.Mount(tag, dir, "virtiofs", flags, "")
	}
	src := filepath.Join(standIn, "fs", tag)
	if err := syscall.Mount(src, dir, "", syscall.MS_BIND, ""); err != nil {
		return err
	}
	if flags&syscall.MS_RDONLY == 0 {
		return nil
	}
	return syscall.Mount("", dir, "", syscall.MS_BIND|syscall.MS_REMOUNT|flags, "")
}

// listenStandIn is the vsock port as the double's unix socket.
func listenStandIn(dir string, port uint32) (Listener, error) {
	path := filepath.Join(dir, "vsock", strconv.FormatUint(uint64(port), 10))
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: path}); err != nil {
		syscall.Close(fd)
		return nil, fmt.Errorf("bind the vsock stand-in %s: %v", path, err)
	}
	if err := syscall.Listen(fd, 64); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return vsockListener{fd}, nil
}

// listeningFile tells the host the agent listens on its vsock port (krun.ts
// connects only once it exists): libkrun accepts a host connection before
// anything in the guest listens, and holds it 5 s when the guest refuses it.
const listeningFile = "agent.listening"

// AnnounceListening creates listeningFile in the host-shared control dir.
func AnnounceListening(ctlDirFd int) error {
	if ctlDirFd < 0 {
		return fmt.Errorf("no control share to announce in")
	}
	fd, err := syscall.Openat(ctlDirFd, listeningFile, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("create %s: %v", listeningFile, err)
	}
	return syscall.Close(fd)
}
