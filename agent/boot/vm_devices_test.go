package boot

import (
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestAnnounceListeningCreatesTheFileOnceAndNeverThroughALink(t *testing.T) {
	dir := t.TempDir()
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	if err := AnnounceListening(fd); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(filepath.Join(dir, listeningFile)); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("want a regular %s, got %v, %v", listeningFile, st, err)
	}
	if err := AnnounceListening(fd); err == nil {
		t.Fatal("a second announcement must fail (O_EXCL)")
	}
	// A link planted in its place is not followed.
	os.Remove(filepath.Join(dir, listeningFile))
	target := filepath.Join(t.TempDir(), "target")
	if err := os.Symlink(target, filepath.Join(dir, listeningFile)); err != nil {
		t.Fatal(err)
	}
	if err := AnnounceListening(fd); err == nil {
		t.Fatal("announcing through a symlink must fail")
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Fatalf("the link's target was created: %v", err)
	}
	if err := AnnounceListening(-1); err == nil {
		t.Fatal("without a control share there is nothing to announce in")
	}
}

func TestListenStandInServesTheVsockPortAsAUnixSocket(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "vsock"), 0o700); err != nil {
		t.Fatal(err)
	}
	l, err := listenStandIn(dir, 1024)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := net.Dial("unix", filepath.Join(dir, "vsock", "1024"))
		if err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	conn, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	buf := make([]byte, 2)
	if _, err := conn.Read(buf); err != nil || string(buf) != "hi" {
		t.Fatalf("read %q, %v", buf, err)
	}
}
