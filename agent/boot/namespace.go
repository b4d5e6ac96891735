package boot

// Namespace mode (bubblewrap): the image is already bind-mounted read-only at
// lowerDir, /krunbox is bwrap's tmpfs, and the host connects to a unix socket
// in the bind-mounted control dir.

import (
	"fmt"
	"io"
	"net"
	"os"

	"krunbox/agent/config"
)

type namespaceMode struct{}

func (namespaceMode) prepare(c *config.Config) error {
	if st, err := os.Stat(c.LowerDir); err != nil || !st.IsDir() {
		return fmt.Errorf("image root %s is not a directory: %v", c.LowerDir, err)
	}
	return nil
}

func (namespaceMode) listen(c *config.Config) (Listener, error) {
	if c.ListenFd > 0 {
		return inheritedListener(c.ListenFd)
	}
	_ = os.Remove(c.ListenPath) // a stale socket from a previous run
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: c.ListenPath, Net: "unix"})
	if err != nil {
		return nil, err
	}
	// After the pivot the path means something else (or nothing) to us:
	// never unlink by name.
	l.SetUnlinkOnClose(false)
	if err := os.Chmod(c.ListenPath, 0o600); err != nil {
		l.Close()
		return nil, err
	}
	return unixListener{l}, nil
}

// inheritedListener serves on the socket the host made, bound and listening
// before the agent started: the host's connection may already be waiting in
// its queue, so the handshake overlaps the boot.
func inheritedListener(fd int) (Listener, error) {
	f := os.NewFile(uintptr(fd), "agent.sock")
	if f == nil {
		return nil, fmt.Errorf("listenFd %d is not an open file", fd)
	}
	defer f.Close() // FileListener keeps a close-on-exec copy
	l, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("listenFd %d: %v", fd, err)
	}
	ul, ok := l.(*net.UnixListener)
	if !ok {
		l.Close()
		return nil, fmt.Errorf("listenFd %d is not a unix socket", fd)
	}
	ul.SetUnlinkOnClose(false)
	return unixListener{ul}, nil
}

func (namespaceMode) Exit(code int) { os.Exit(code) }

// UnixListener serves the host on a unix socket (in-process tests listen so too).
func UnixListener(l *net.UnixListener) Listener { return unixListener{l} }

type unixListener struct{ l *net.UnixListener }

func (u unixListener) Accept() (io.ReadWriteCloser, error) {
	c, err := u.l.AcceptUnix()
	if err == nil {
		// A unix stream socket's flow control is the sender's buffer alone: a
		// larger one (capped by net.core.wmem_max) lets bulk output run ahead
		// of the host's reads instead of waking both sides every ~200 KiB.
		_ = c.SetWriteBuffer(4 << 20)
	}
	return c, err
}
func (u unixListener) Close() error { return u.l.Close() }
