package fsops

import (
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"krunbox/agent/protocol"
)

func TestFsMvSameFilesystem(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	fsPutFile(t, a, "A", 0o644)
	fsPutFile(t, b, "B", 0o644)

	fsCall(t, fsHandler(Mv), fsReq{"src": a, "dst": b}).failed(t, protocol.CodeFsExists, b)
	if fsGetFile(t, a) != "A" || fsGetFile(t, b) != "B" {
		t.Fatal("overwrite:false touched a file")
	}
	fsCall(t, fsHandler(Mv), fsReq{"src": a, "dst": b, "overwrite": true}).ok(t, nil)
	if fsGetFile(t, b) != "A" {
		t.Fatal("overwrite:true did not replace")
	}
	fsCall(t, fsHandler(Mv), fsReq{"src": a, "dst": b}).failed(t, protocol.CodeFsNotFound, a)

	// A symlink moves as the link itself.
	link, moved := filepath.Join(dir, "link"), filepath.Join(dir, "moved-link")
	os.Symlink(b, link)
	fsCall(t, fsHandler(Mv), fsReq{"src": link, "dst": moved}).ok(t, nil)
	if target, err := os.Readlink(moved); err != nil || target != b || fsGetFile(t, b) != "A" {
		t.Fatalf("moved link: %q %v", target, err)
	}

	noParent := filepath.Join(dir, "nope", "x")
	fsCall(t, fsHandler(Mv), fsReq{"src": b, "dst": noParent}).failed(t, protocol.CodeFsNotFound, noParent)

	full := filepath.Join(dir, "full")
	fsPutFile(t, filepath.Join(full, "x"), "x", 0o644)
	d := filepath.Join(dir, "d")
	os.Mkdir(d, 0o755)
	fsCall(t, fsHandler(Mv), fsReq{"src": d, "dst": full, "overwrite": true}).failed(t, protocol.CodeFsNotEmpty, full)
	fsCall(t, fsHandler(Mv), fsReq{"src": b, "dst": full, "overwrite": true}).failed(t, protocol.CodeFsWrongType, full)
	fsCall(t, fsHandler(Mv), fsReq{"src": d, "dst": filepath.Join(d, "inside")}).failed(t, protocol.CodeFsBadRequest, d)
	fsCall(t, fsHandler(Mv), fsReq{"src": "/", "dst": filepath.Join(dir, "root")}).failed(t, protocol.CodeFsBadRequest, "/")
}

// otherDevice returns a writable directory on another filesystem than t.TempDir().
func fsOtherDevice(t *testing.T) string {
	var a, b syscall.Stat_t
	syscall.Stat(os.TempDir(), &a)
	if err := syscall.Stat("/dev/shm", &b); err != nil || a.Dev == b.Dev {
		t.Skip("no second filesystem (/dev/shm) for an EXDEV move")
	}
	dir, err := os.MkdirTemp("/dev/shm", "fsmv")
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func TestFsMvAcrossFilesystems(t *testing.T) {
	other := fsOtherDevice(t)
	dir := t.TempDir()

	src := filepath.Join(dir, "f")
	fsPutFile(t, src, "payload", 0o4711)
	dst := filepath.Join(other, "f")
	fsCall(t, fsHandler(Mv), fsReq{"src": src, "dst": dst}).ok(t, nil)
	if fsGetFile(t, dst) != "payload" || fsPerm(t, dst) != 0o4711 {
		t.Fatalf("copy: mode %o", fsPerm(t, dst))
	}
	if _, err := os.Lstat(src); !os.IsNotExist(err) {
		t.Fatal("src not removed")
	}

	tree := filepath.Join(dir, "tree")
	fsPutFile(t, filepath.Join(tree, "sub", "a.txt"), "a", 0o600)
	os.Symlink("/etc/passwd", filepath.Join(tree, "sub", "ln"))
	os.Chmod(filepath.Join(tree, "sub"), 0o500) // read-only dir: filled before its mode is set
	treeDst := filepath.Join(other, "tree")
	fsCall(t, fsHandler(Mv), fsReq{"src": tree, "dst": treeDst}).ok(t, nil)
	if fsGetFile(t, filepath.Join(treeDst, "sub", "a.txt")) != "a" || fsPerm(t, filepath.Join(treeDst, "sub")) != 0o500 {
		t.Fatal("tree copy")
	}
	if target, _ := os.Readlink(filepath.Join(treeDst, "sub", "ln")); target != "/etc/passwd" {
		t.Fatalf("link copied as %q", target)
	}
	if _, err := os.Lstat(tree); !os.IsNotExist(err) {
		t.Fatal("src tree not removed")
	}

	// overwrite:false still holds across devices.
	again := filepath.Join(dir, "again")
	fsPutFile(t, again, "x", 0o644)
	fsCall(t, fsHandler(Mv), fsReq{"src": again, "dst": dst}).failed(t, protocol.CodeFsExists, dst)

	// A copy failure (a socket cannot be copied) leaves src whole and no temp at dst.
	bad := filepath.Join(dir, "bad")
	fsPutFile(t, filepath.Join(bad, "keep"), "k", 0o644)
	l, err := net.Listen("unix", filepath.Join(bad, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	fsCall(t, fsHandler(Mv), fsReq{"src": bad, "dst": filepath.Join(other, "bad")}).failed(t, protocol.CodeFsWrongType, filepath.Join(bad, "sock"))
	if fsGetFile(t, filepath.Join(bad, "keep")) != "k" {
		t.Fatal("src damaged by a failed cross-device move")
	}
	if left := fsTempLeftovers(t, other); len(left) != 0 {
		t.Fatalf("temp left: %v", left)
	}
	if _, err := os.Lstat(filepath.Join(other, "bad")); !os.IsNotExist(err) {
		t.Fatal("partial dst left")
	}
}
