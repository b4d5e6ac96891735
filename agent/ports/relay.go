package ports

// The two byte pumps of a port connection. Both directions are bounded by the
// protocol's credit, so a slow reader on either side stops the other side
// through TCP, never through agent memory: the host's DATA waits in the
// stream's inbox (at most the credit the agent granted) and goes to the
// service one frame at a time; the service's bytes are read one pooled frame
// buffer at a time and sent only against the host's credit.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"krunbox/agent/protocol"
)

// relayPort runs both pumps until both directions have ended (half-closes
// pass through: the host's END shuts the service's read side, the service's
// EOF becomes EVENT {type: "eof"}). The first failure ends both: the stream
// fails (which wakes a pump waiting for host data or credit) and the socket
// closes (which wakes a pump blocked on it).
func relayPort(s protocol.Stream, tc *net.TCPConn, port int) (toService, fromService int64, oe *protocol.OpError) {
	// CANCEL or a lost host connection closes the socket, which ends both pumps.
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-s.Context().Done():
			_ = tc.Close()
		case <-done:
		}
	}()
	ended := make(chan *protocol.OpError, 2)
	go func() {
		var e *protocol.OpError
		toService, e = pumpToService(s, tc, port)
		ended <- e
	}()
	go func() {
		var e *protocol.OpError
		fromService, e = pumpToHost(s, tc, port)
		ended <- e
	}()
	for i := 0; i < 2; i++ {
		if e := <-ended; e != nil && oe == nil {
			oe = e
			_ = s.Fail(e)
			_ = tc.Close()
		}
	}
	return toService, fromService, oe
}

// pumpToService writes the host's DATA to the service; the host's END becomes
// a half-close (the service reads EOF and may still answer).
func pumpToService(s protocol.Stream, tc *net.TCPConn, port int) (int64, *protocol.OpError) {
	var total int64
	for {
		data, eof, err := s.RecvData()
		if err != nil {
			return total, streamGone(port)
		}
		if len(data) > 0 {
			n, werr := tc.Write(data)
			protocol.RecycleData(data)
			total += int64(n)
			if werr != nil {
				return total, portBroken(s, port, werr)
			}
		}
		if eof {
			_ = tc.CloseWrite() // a peer that already closed makes this moot, not wrong
			return total, nil
		}
	}
}

// pumpToHost sends what the service writes as DATA, waiting for the host's
// credit before reading on; the service's EOF is announced with EVENT eof.
func pumpToHost(s protocol.Stream, tc *net.TCPConn, port int) (int64, *protocol.OpError) {
	var total int64
	for {
		// Read straight into a pooled frame buffer; the writer pools it again once sent.
		fb := protocol.DataFramePool.Get().(*[]byte)
		n, err := tc.Read((*fb)[protocol.FrameHeaderLen:])
		if n > 0 {
			if protocol.SendPooledData(s, fb, n) != nil {
				return total, streamGone(port)
			}
			total += int64(n)
		} else {
			protocol.DataFramePool.Put(fb)
		}
		if err == io.EOF {
			if s.Event(protocol.PortConnectEofEvent{Type: protocol.EventEof}) != nil {
				return total, streamGone(port)
			}
			return total, nil
		}
		if err != nil {
			return total, portBroken(s, port, err)
		}
	}
}

// streamGone: the host cancelled the stream, or its connection (or the stream,
// after the other pump failed) is gone; nobody reads this error.
func streamGone(port int) *protocol.OpError {
	return protocol.AbortedError(fmt.Sprintf("connection to port %d", port), "was closed by the host")
}

// portBroken names why the service's side of the connection failed.
func portBroken(s protocol.Stream, port int, err error) *protocol.OpError {
	if s.Context().Err() != nil {
		return streamGone(port)
	}
	oe := protocol.PortResetError(port, err)
	switch {
	case errors.Is(err, syscall.ECONNRESET):
		oe.Errno = "ECONNRESET"
	case errors.Is(err, syscall.EPIPE):
		oe.Errno = "EPIPE"
	}
	return oe
}
