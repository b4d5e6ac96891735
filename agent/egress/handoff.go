package egress

// With a handoff channel (Config.HandoffFd, a unix seqpacket socket to the host), the relay
// carries no proxy connection: it sends its proxy listener to the host once, the host accepts
// the sandbox's proxy connections itself (one process hop less for every request), and this
// side keeps only the requests for the sandbox's own loopback, which the host cannot reach and
// hands back (the bytes it read and the connection's other end, in one message). The host
// holds the only copy of the listener: when it is gone, a connect to the proxy port is refused.

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
)

// handBackMax is the most a handed-back message carries: a head (16 KiB at most on the
// host's side) and what the host read with it.
const handBackMax = 128 << 10

// handOff sends the proxy listener over the channel, then serves what comes back; it returns
// when the host is gone.
func (r *Relay) handOff() {
	ch := unixConn(r.c.HandoffFd, "handoff")
	if ch == nil {
		r.proxy.Close()
		return
	}
	defer ch.Close()
	lf, err := r.proxy.File()
	// The host's copy is the only one from here on.
	r.proxy.Close()
	if err != nil {
		return
	}
	_, _, err = ch.WriteMsgUnix([]byte("proxy"), syscall.UnixRights(int(lf.Fd())), nil)
	lf.Close()
	if err != nil {
		return
	}
	buf := make([]byte, handBackMax)
	oob := make([]byte, syscall.CmsgSpace(4))
	for {
		n, oobn, flags, _, err := ch.ReadMsgUnix(buf, oob)
		if err != nil || (n == 0 && oobn == 0) {
			return
		}
		conn := handedBack(oob[:oobn])
		if conn == nil || flags&(syscall.MSG_TRUNC|syscall.MSG_CTRUNC) != 0 {
			if conn != nil {
				conn.Close()
			}
			continue
		}
		if atomic.AddInt64(&r.streams, 1) > maxStreams {
			atomic.AddInt64(&r.streams, -1)
			conn.Close()
			continue
		}
		first := append([]byte(nil), buf[:n]...)
		go func() {
			defer atomic.AddInt64(&r.streams, -1)
			r.serveHandedBack(conn, first)
		}()
	}
}

// handedBack is the one stream socket a message carries, or nil (any other fds are closed).
func handedBack(oob []byte) *net.UnixConn {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for _, m := range msgs {
		if got, err := syscall.ParseUnixRights(&m); err == nil {
			fds = append(fds, got...)
		}
	}
	if len(fds) != 1 {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return nil
	}
	return unixConn(fds[0], "handed-back")
}

// unixConn takes over fd (a unix socket, closed whatever happens), or nil when it is not one.
func unixConn(fd int, name string) *net.UnixConn {
	// Not inherited by a command started before the dup below closes it.
	syscall.CloseOnExec(fd)
	f := os.NewFile(uintptr(fd), name)
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil
	}
	if uc, ok := c.(*net.UnixConn); ok {
		return uc
	}
	c.Close()
	return nil
}

// serveHandedBack serves a request for the sandbox's own loopback: `first` is what the host
// read of it, the rest comes on c. Anything else the host has no reason to send is closed.
func (r *Relay) serveHandedBack(c *net.UnixConn, first []byte) {
	// Large enough that its first fill takes all of `first`: serveLocal's peek then holds every byte read.
	br := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(first), c), len(first)+requestLineMax)
	line, err := br.ReadSlice('\n')
	if err != nil {
		c.Close()
		return
	}
	method, target, proto, ok := requestLine(line)
	if !ok {
		c.Close()
		return
	}
	addr, ok := r.ownLoopback(method, target)
	if !ok {
		c.Close()
		return
	}
	serveLocal(c, br, addr, method, target, proto)
}
