package egress

import (
	"bufio"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// handoffRelay starts a relay; it returns the host's end of the handoff channel.
func handoffRelay(t *testing.T, c Config) (*Relay, *net.UnixConn) {
	t.Helper()
	return relayWithHost(t, c, nil)
}

// receiveListener reads the one fd the relay sends.
func receiveListener(t *testing.T, host *net.UnixConn) *net.TCPListener {
	t.Helper()
	buf, oob := make([]byte, 64), make([]byte, syscall.CmsgSpace(4))
	host.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, oobn, _, _, err := host.ReadMsgUnix(buf, oob)
	if err != nil {
		t.Fatal(err)
	}
	if string(buf[:n]) != "proxy" {
		t.Fatalf("message %q", buf[:n])
	}
	msgs, _ := syscall.ParseSocketControlMessage(oob[:oobn])
	fds, err := syscall.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("fds %v %v", fds, err)
	}
	f := os.NewFile(uintptr(fds[0]), "listener")
	l, err := net.FileListener(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	return l.(*net.TCPListener)
}

func TestHandoffSendsTheOnlyCopyOfTheProxyListener(t *testing.T) {
	r, host := handoffRelay(t, Config{})
	l := receiveListener(t, host)
	addr := l.Addr().String()
	if addr != "127.0.0.1:"+strconv.Itoa(r.c.ProxyPort) {
		t.Fatalf("listener on %s", addr)
	}
	// The host accepts what the sandbox connects.
	go func() {
		c, err := net.Dial("tcp4", addr)
		if err == nil {
			c.Write([]byte("x"))
			c.Close()
		}
	}()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	// The host's copy closed (the host gone): nothing accepts any more, the connect is refused.
	l.Close()
	if c, err := net.DialTimeout("tcp4", addr, 2*time.Second); err == nil {
		c.Close()
		t.Fatal("the relay kept a copy of the proxy listener: a connect succeeded after the host's copy closed")
	}
}

// handBack sends `first` and one end of a new stream pair; it returns the other end.
func handBack(t *testing.T, host *net.UnixConn, first string) *net.UnixConn {
	t.Helper()
	pair, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := host.WriteMsgUnix([]byte(first), syscall.UnixRights(pair[1]), nil); err != nil {
		t.Fatal(err)
	}
	syscall.Close(pair[1])
	f := os.NewFile(uintptr(pair[0]), "mine")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	return c.(*net.UnixConn)
}

// A request the host hands back for the sandbox's own loopback goes there (absolute form in
// origin form); one that is not (another spelling, or one the policy names as the host's) is
// closed unserved: the host has no reason to hand it back.
func TestHandedBackOwnLoopback(t *testing.T) {
	local, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	port := strconv.Itoa(local.Addr().(*net.TCPAddr).Port)
	go func() {
		for {
			c, err := local.Accept()
			if err != nil {
				return
			}
			br := bufio.NewReader(c)
			line, _ := br.ReadString('\n')
			// The whole head is read before the answer: a close with unread bytes sends a
			// reset, which could overtake the answer on its way back (a flaky failure).
			for rest := line; strings.HasSuffix(line, "HTTP/1.1\r\n") && rest != "\r\n" && rest != ""; {
				rest, _ = br.ReadString('\n')
			}
			c.Write([]byte("local saw " + line))
			c.Close()
		}
	}()
	named := Config{HostLoopback: []HostLoopback{{Net: "127.0.0.1/32", Port: local.Addr().(*net.TCPAddr).Port}}}
	for _, tc := range []struct {
		cfg  Config
		req  string
		want string
	}{
		{Config{}, "GET http://127.0.0.1:" + port + "/x?y HTTP/1.1\r\nHost: a\r\n\r\n", "local saw GET /x?y HTTP/1.1\r\n"},
		{Config{}, "GET http://LOCALHOST.:" + port + "/ HTTP/1.1\r\n\r\n", "local saw GET / HTTP/1.1\r\n"},
		{Config{}, "CONNECT [::ffff:127.0.0.1]:" + port + " HTTP/1.1\r\nHost: a\r\n\r\nhello\n", "HTTP/1.1 200 Connection Established\r\n\r\nlocal saw hello\n"},
		{Config{}, "GET http://127.1:" + port + "/ HTTP/1.1\r\n\r\n", ""},
		{named, "GET http://127.0.0.1:" + port + "/ HTTP/1.1\r\n\r\n", ""},
	} {
		_, host := handoffRelay(t, tc.cfg)
		receiveListener(t, host)
		c := handBack(t, host, tc.req)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		got, _ := io.ReadAll(c)
		c.Close()
		if string(got) != tc.want {
			t.Errorf("%q: got %q, want %q", tc.req, got, tc.want)
		}
	}
}

func TestHandedBackRequestForElsewhereIsClosedUnserved(t *testing.T) {
	_, host := handoffRelay(t, Config{})
	receiveListener(t, host)
	for _, first := range []string{
		"GET http://192.0.2.1/ HTTP/1.1\r\n\r\n",
		"CONNECT example.com:443 HTTP/1.1\r\n\r\n",
		"garbage\r\n\r\n",
	} {
		c := handBack(t, host, first)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || len(got) != 0 {
			t.Fatalf("%q: got %q, %v", first, got, err)
		}
	}
}

func TestHandoffMessagesWithoutOneSocketAreDropped(t *testing.T) {
	_, host := handoffRelay(t, Config{})
	receiveListener(t, host)
	// No fd, then two: neither is served, and the relay goes on taking the next.
	if _, _, err := host.WriteMsgUnix([]byte("GET http://127.0.0.1:1/ HTTP/1.1\r\n\r\n"), nil, nil); err != nil {
		t.Fatal(err)
	}
	a, _ := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	b, _ := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if _, _, err := host.WriteMsgUnix([]byte("GET http://127.0.0.1:1/ HTTP/1.1\r\n\r\n"), syscall.UnixRights(a[1], b[1]), nil); err != nil {
		t.Fatal(err)
	}
	syscall.Close(a[1])
	syscall.Close(b[1])
	for _, end := range []int{a[0], b[0]} {
		// The relay closed both ends it got: a read here ends at once.
		buf := make([]byte, 1)
		syscall.SetsockoptTimeval(end, syscall.SOL_SOCKET, syscall.SO_RCVTIMEO, &syscall.Timeval{Sec: 5})
		if n, err := syscall.Read(end, buf); n != 0 || err != nil {
			t.Fatalf("an end of a two-fd message was kept: read %d, %v", n, err)
		}
		syscall.Close(end)
	}
	c := handBack(t, host, "GET http://127.0.0.1:1/ HTTP/1.1\r\n\r\n")
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	got, _ := io.ReadAll(c)
	if !strings.Contains(string(got), "502 Bad Gateway") {
		t.Fatalf("the next request after the bad messages: got %q", got)
	}
}
