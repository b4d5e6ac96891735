package egress

import (
	"encoding/binary"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// relayWithHost starts a relay on free ports whose control directory is a temp dir; dnsHost,
// when not nil, serves the resolver's socket there. It returns the host's end of the handoff
// channel, over which the relay sends its proxy listener first.
func relayWithHost(t *testing.T, c Config, dnsHost func(net.Conn)) (*Relay, *net.UnixConn) {
	t.Helper()
	dir := t.TempDir()
	if dnsHost != nil {
		l, err := net.Listen("unix", filepath.Join(dir, DNSSocket))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				conn, err := l.Accept()
				if err != nil {
					return
				}
				go dnsHost(conn)
			}
		}()
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "host")
	hc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	host := hc.(*net.UnixConn)
	t.Cleanup(func() { host.Close() })
	c.HandoffFd = fds[1]
	c.ProxyPort, c.DNSPort = freePort(t), freePort(t)
	r, err := Listen(&c)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Open(dir, syscall.O_DIRECTORY|syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	r.Serve(fd)
	return r, host
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// No resolver on the host side: the sandbox's query is dropped (its proxy: handoff_test.go).
func TestHostGoneFailsClosed(t *testing.T) {
	r, _ := relayWithHost(t, Config{}, nil)
	u, err := net.Dial("udp4", r.dnsUDP.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	u.Write(make([]byte, 20))
	u.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := u.Read(make([]byte, 100)); err == nil {
		t.Fatalf("an answer of %d bytes with no host", n)
	}
}

// A UDP query travels after its 2-byte length, and the answer comes back as a datagram.
func TestUDPQueryFramed(t *testing.T) {
	r, _ := relayWithHost(t, Config{}, func(c net.Conn) {
		defer c.Close()
		var size [2]byte
		io.ReadFull(c, size[:])
		q := make([]byte, binary.BigEndian.Uint16(size[:]))
		io.ReadFull(c, q)
		q[2] |= 0x80
		binary.BigEndian.PutUint16(size[:], uint16(len(q)))
		c.Write(append(size[:], q...))
	})
	u, err := net.Dial("udp4", r.dnsUDP.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	q := []byte{0, 7, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 'a', 0, 0, 1, 0, 1}
	u.Write(q)
	u.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 100)
	n, err := u.Read(buf)
	if err != nil || n != len(q) || buf[2] != 0x81 {
		t.Fatalf("answer %x, %v", buf[:n], err)
	}
}

// Without a handoff channel there is no way to hand the proxy's listener over: the relay refuses to start.
func TestRelayWithoutHandoffChannelIsRefused(t *testing.T) {
	if _, err := Listen(&Config{ProxyPort: freePort(t), DNSPort: freePort(t)}); err == nil || !strings.Contains(err.Error(), "handoff") {
		t.Fatalf("got %v", err)
	}
}
