package exec

// Pseudo-terminals for commands started with exec.start's pty option: the
// command gets the slave side as stdin, stdout and stderr and as its
// controlling terminal (a session of its own), the agent keeps the master. The
// terminal's output is the command's stdout log; stdin DATA goes to the master.

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"unsafe"

	"krunbox/agent/protocol"
)

// Window sizes a terminal accepts; the kernel takes any u16, a real terminal is far smaller.
const (
	ptyMinSide = 1
	ptyMaxSide = 4096
)

// ptySize is the contract's ptySize (exec.start's pty, exec.resize's cols and rows).
type ptySize = protocol.PtySize

func validatePtySize(p *ptySize, prefix string) *protocol.OpError {
	allowed := fmt.Sprintf("within %d..%d", ptyMinSide, ptyMaxSide)
	if p.Cols < ptyMinSide || p.Cols > ptyMaxSide {
		return protocol.OutOfRangeError(prefix+"cols", allowed, p.Cols)
	}
	if p.Rows < ptyMinSide || p.Rows > ptyMaxSide {
		return protocol.OutOfRangeError(prefix+"rows", allowed, p.Rows)
	}
	return nil
}

// winsize is struct winsize from <asm-generic/termios.h>.
type winsize struct {
	rows, cols, xpixel, ypixel uint16
}

// openPty allocates a pseudo-terminal the way posix_openpt/grantpt/unlockpt
// do: open the multiplexer, unlock the slave, find its number, open it. The
// slave belongs to the command's user so programs that reopen their terminal
// (tty, ssh, su) can; the master stays the agent's.
func openPty(size ptySize, cred *syscall.Credential) (master, slave *os.File, err error) {
	mfd, err := syscall.Open("/dev/ptmx", syscall.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %v", err)
	}
	unlock := int32(0)
	if err := ioctl(mfd, syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock))); err != nil {
		syscall.Close(mfd)
		return nil, nil, fmt.Errorf("unlock pty: %v", err)
	}
	var n uint32
	if err := ioctl(mfd, syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n))); err != nil {
		syscall.Close(mfd)
		return nil, nil, fmt.Errorf("pty number: %v", err)
	}
	name := "/dev/pts/" + strconv.FormatUint(uint64(n), 10)
	sfd, err := syscall.Open(name, syscall.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		syscall.Close(mfd)
		return nil, nil, fmt.Errorf("open %s: %v", name, err)
	}
	if cred != nil {
		_ = syscall.Fchown(sfd, int(cred.Uid), -1)
	}
	if err := setWinsize(mfd, size); err != nil {
		syscall.Close(mfd)
		syscall.Close(sfd)
		return nil, nil, err
	}
	// Non-blocking before NewFile: the runtime poller then serves the master,
	// so reads take the deadline of the post-exit drain like a pipe's.
	if err := syscall.SetNonblock(mfd, true); err != nil {
		syscall.Close(mfd)
		syscall.Close(sfd)
		return nil, nil, err
	}
	return os.NewFile(uintptr(mfd), "ptmx"), os.NewFile(uintptr(sfd), name), nil
}

// setWinsize sets the terminal's size; the kernel sends SIGWINCH to its
// foreground process group when it changed.
func setWinsize(fd int, size ptySize) error {
	ws := winsize{rows: uint16(size.Rows), cols: uint16(size.Cols)}
	if err := ioctl(fd, syscall.TIOCSWINSZ, uintptr(unsafe.Pointer(&ws))); err != nil {
		return fmt.Errorf("set pty size: %v", err)
	}
	return nil
}

func ioctl(fd int, req uint, arg uintptr) error {
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), uintptr(req), arg); e != 0 {
		return e
	}
	return nil
}

// openPtyStdio is openStdio for a terminal: the child's three fds are the
// slave; the parent's stdin writer and stdout reader are the master (the
// writer a duplicate, so closing stdin at END leaves the reader open), there
// is no stderr. control is one more duplicate that resize uses until finish.
func openPtyStdio(size ptySize, cred *syscall.Credential) (child [3]*os.File, parent [3]*os.File, control *os.File, err error) {
	master, slave, err := openPty(size, cred)
	if err != nil {
		return child, parent, nil, err
	}
	writer, err := dupFile(master, "ptmx-in")
	if err != nil {
		master.Close()
		slave.Close()
		return child, parent, nil, err
	}
	control, err = dupFile(master, "ptmx-control")
	if err != nil {
		master.Close()
		slave.Close()
		writer.Close()
		return child, parent, nil, err
	}
	return [3]*os.File{slave, slave, slave}, [3]*os.File{writer, master, nil}, control, nil
}

// dupFile duplicates f's descriptor (close-on-exec, non-blocking like f).
func dupFile(f *os.File, name string) (*os.File, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var dupErr error
	if cerr := rc.Control(func(raw uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, raw, syscall.F_DUPFD_CLOEXEC, 0)
		if e != 0 {
			dupErr = e
			return
		}
		fd = int(r)
	}); cerr != nil {
		return nil, cerr
	}
	if dupErr != nil {
		return nil, fmt.Errorf("dup pty: %v", dupErr)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// resize changes a running terminal command's window size.
func (c *Command) resize(size ptySize) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ptyControl == nil {
		return errNoPty
	}
	rc, err := c.ptyControl.SyscallConn()
	if err != nil {
		return err
	}
	var werr error
	if cerr := rc.Control(func(fd uintptr) { werr = setWinsize(int(fd), size) }); cerr != nil {
		return cerr
	}
	return werr
}

var errNoPty = fmt.Errorf("has no terminal")

// closePty releases the resize handle once the command has ended.
func (c *Command) closePty() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ptyControl != nil {
		c.ptyControl.Close()
		c.ptyControl = nil
	}
}
