package exec

import (
	"syscall"
	"testing"
	"unsafe"
)

func winsizeOf(t *testing.T, fd uintptr) winsize {
	t.Helper()
	var ws winsize
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCGWINSZ, uintptr(unsafe.Pointer(&ws))); e != 0 {
		t.Fatalf("TIOCGWINSZ: %v", e)
	}
	return ws
}

// The slave is a terminal of the asked size, a resize through the master
// shows on it, and what the master writes is read on the slave.
func TestOpenPtySizeResizeAndData(t *testing.T) {
	master, slave, err := openPty(ptySize{Cols: 100, Rows: 30}, nil)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	defer master.Close()
	defer slave.Close()
	if ws := winsizeOf(t, slave.Fd()); ws.cols != 100 || ws.rows != 30 {
		t.Fatalf("size %dx%d, want 100x30", ws.cols, ws.rows)
	}
	rc, _ := master.SyscallConn()
	_ = rc.Control(func(fd uintptr) {
		if err := setWinsize(int(fd), ptySize{Cols: 132, Rows: 43}); err != nil {
			t.Fatal(err)
		}
	})
	if ws := winsizeOf(t, slave.Fd()); ws.cols != 132 || ws.rows != 43 {
		t.Fatalf("after resize %dx%d, want 132x43", ws.cols, ws.rows)
	}
	if _, err := master.Write([]byte("typed\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := slave.Read(buf)
	if err != nil || string(buf[:n]) != "typed\n" {
		t.Fatalf("slave read %q, %v", buf[:n], err)
	}
}

func TestPtySizeBounds(t *testing.T) {
	for _, bad := range []ptySize{{Cols: 0, Rows: 24}, {Cols: 80, Rows: 0}, {Cols: 4097, Rows: 24}, {Cols: 80, Rows: 4097}, {Cols: -1, Rows: -1}} {
		if validatePtySize(&bad, "pty.") == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	if err := validatePtySize(&ptySize{Cols: 4096, Rows: 1}, ""); err != nil {
		t.Errorf("4096x1 refused: %v", err.Message)
	}
}
