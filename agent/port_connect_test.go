package main

// port.connect over a real agent connection to real TCP services of the test
// process (the in-process agent shares its network namespace).

import (
	"encoding/json"
	"io"
	"net"
	"testing"
	"time"

	"krunbox/agent/protocol"
)

// listenLoopback serves each connection of a fresh 127.0.0.1 port with handle.
func listenLoopback(t *testing.T, handle func(net.Conn)) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

func finalCode(t *testing.T, r tresult) string {
	t.Helper()
	if r.final.Type != protocol.FtError {
		t.Fatalf("expected an ERROR, got %s", r.final.Payload)
	}
	var e protocol.OpError
	_ = json.Unmarshal(r.final.Payload, &e)
	return e.Code
}

func TestPortConnectRefusedAndBadPorts(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	l, _ := net.Listen("tcp4", "127.0.0.1:0")
	free := l.Addr().(*net.TCPAddr).Port
	l.Close()
	if code := finalCode(t, c.request("port.connect", map[string]any{"port": free}).collect(10*time.Second)); code != protocol.CodePortRefused {
		t.Fatalf("port %d nobody listens on: %s", free, code)
	}
	for _, bad := range []any{0, 65536, -1, 1.5, "80", nil} {
		if code := finalCode(t, c.request("port.connect", map[string]any{"port": bad}).collect(10*time.Second)); code != "S001" {
			t.Fatalf("port %v: %s", bad, code)
		}
	}
}

func TestPortConnectEchoWithHalfClose(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	port := listenLoopback(t, func(conn net.Conn) {
		_, _ = io.Copy(conn, conn) // echo until the host's half-close, then close
		conn.Close()
	})
	s := c.request("port.connect", map[string]any{"port": port})
	if f := s.next(5 * time.Second); f.Type != protocol.FtEvent || string(f.Payload) != `{"type":"connected"}` {
		t.Fatalf("first frame: %#x %s", f.Type, f.Payload)
	}
	s.sendData([]byte("hello, "), false)
	s.sendData([]byte("service"), true)
	r := s.collect(10 * time.Second)
	if string(r.data) != "hello, service" {
		t.Fatalf("echoed %q", r.data)
	}
	if len(r.events) != 1 || r.events[0]["type"] != "eof" {
		t.Fatalf("events %v", r.events)
	}
	if r.final.Type != protocol.FtResponse || r.finalJS["toService"] != float64(14) || r.finalJS["fromService"] != float64(14) {
		t.Fatalf("final %s", r.final.Payload)
	}
}

func TestPortConnectCancelClosesTheServiceSide(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	ended := make(chan error, 1)
	port := listenLoopback(t, func(conn net.Conn) {
		_, err := io.Copy(io.Discard, conn)
		ended <- err
		conn.Close()
	})
	s := c.request("port.connect", map[string]any{"port": port})
	if f := s.next(5 * time.Second); f.Type != protocol.FtEvent {
		t.Fatalf("first frame: %#x %s", f.Type, f.Payload)
	}
	s.sendData([]byte("x"), false)
	c.sendRaw(protocol.EncodeFrame(s.id, protocol.FtCancel, 0, nil))
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the service's connection stayed open after CANCEL")
	}
}

func TestPortConnectServiceResetIsS231(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	port := listenLoopback(t, func(conn net.Conn) {
		_, _ = conn.Read(make([]byte, 1))
		_ = conn.(*net.TCPConn).SetLinger(0) // close with RST
		conn.Close()
	})
	s := c.request("port.connect", map[string]any{"port": port})
	s.next(5 * time.Second)
	s.sendData([]byte("x"), false)
	if code := finalCode(t, s.collect(10*time.Second)); code != protocol.CodePortReset {
		t.Fatalf("reset: %s", code)
	}
}
