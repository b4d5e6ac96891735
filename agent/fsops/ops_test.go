package fsops

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"krunbox/agent/protocol"
)

func fsPerm(t *testing.T, p string) uint32 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Mode & 0o7777
}

func TestFsMkdir(t *testing.T) {
	dir := t.TempDir()
	old := syscall.Umask(0o077) // the requested mode must win over the umask
	defer syscall.Umask(old)

	var res struct{ Created bool }
	a := filepath.Join(dir, "a")
	fsCall(t, fsHandler(Mkdir), fsReq{"path": a, "mode": "0755"}).ok(t, &res)
	if !res.Created || fsPerm(t, a) != 0o755 {
		t.Fatalf("created %v mode %o", res.Created, fsPerm(t, a))
	}
	b := filepath.Join(dir, "b")
	fsCall(t, fsHandler(Mkdir), fsReq{"path": b, "mode": 0o1750}).ok(t, &res) // numeric modes too
	if fsPerm(t, b) != 0o1750 {
		t.Fatalf("mode %o", fsPerm(t, b))
	}
	fsCall(t, fsHandler(Mkdir), fsReq{"path": a}).failed(t, protocol.CodeFsExists, a)

	nested := filepath.Join(dir, "x", "y", "z")
	fsCall(t, fsHandler(Mkdir), fsReq{"path": nested}).failed(t, protocol.CodeFsNotFound, nested)
	fsCall(t, fsHandler(Mkdir), fsReq{"path": nested, "parents": true}).ok(t, &res)
	if !res.Created {
		t.Fatal("parents:true did not create")
	}
	fsCall(t, fsHandler(Mkdir), fsReq{"path": nested, "parents": true}).ok(t, &res)
	if res.Created {
		t.Fatal("parents:true on an existing directory must be a no-op")
	}

	file := filepath.Join(dir, "file")
	fsPutFile(t, file, "", 0o644)
	fsCall(t, fsHandler(Mkdir), fsReq{"path": file, "parents": true}).failed(t, protocol.CodeFsExists, file)
	fsCall(t, fsHandler(Mkdir), fsReq{"path": filepath.Join(file, "sub")}).failed(t, protocol.CodeFsWrongType, filepath.Join(file, "sub"))
	// With parents, the failing component is named.
	fsCall(t, fsHandler(Mkdir), fsReq{"path": filepath.Join(file, "sub", "deeper"), "parents": true}).failed(t, protocol.CodeFsWrongType, file)

	for _, bad := range []any{"0999", "abc", 0o17777, -1, 1.5, ""} {
		fsCall(t, fsHandler(Mkdir), fsReq{"path": filepath.Join(dir, "m"), "mode": bad}).failed(t, protocol.CodeFsBadRequest, "")
	}
}

func TestFsRm(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	keep := filepath.Join(outside, "keep.txt")
	fsPutFile(t, keep, "precious", 0o644)

	file := filepath.Join(dir, "f")
	fsPutFile(t, file, "x", 0o644)
	fsCall(t, fsHandler(Rm), fsReq{"path": file}).ok(t, nil)
	if _, err := os.Lstat(file); !os.IsNotExist(err) {
		t.Fatal("file still there")
	}
	fsCall(t, fsHandler(Rm), fsReq{"path": file}).failed(t, protocol.CodeFsNotFound, file)

	link := filepath.Join(dir, "link")
	os.Symlink(outside, link)
	fsCall(t, fsHandler(Rm), fsReq{"path": link, "recursive": true}).ok(t, nil)
	if fsGetFile(t, keep) != "precious" {
		t.Fatal("rm followed the link")
	}

	tree := filepath.Join(dir, "tree")
	fsPutFile(t, filepath.Join(tree, "sub", "a.txt"), "a", 0o644)
	os.Symlink(outside, filepath.Join(tree, "sub", "out"))
	fsCall(t, fsHandler(Rm), fsReq{"path": tree}).failed(t, protocol.CodeFsNotEmpty, tree)
	if fsGetFile(t, filepath.Join(tree, "sub", "a.txt")) != "a" {
		t.Fatal("non-recursive rm touched the tree")
	}
	fsCall(t, fsHandler(Rm), fsReq{"path": tree, "recursive": true}).ok(t, nil)
	if _, err := os.Lstat(tree); !os.IsNotExist(err) {
		t.Fatal("tree still there")
	}
	if fsGetFile(t, keep) != "precious" {
		t.Fatal("recursive rm followed a link")
	}

	empty := filepath.Join(dir, "empty")
	os.Mkdir(empty, 0o755)
	fsCall(t, fsHandler(Rm), fsReq{"path": empty}).ok(t, nil)
	fsCall(t, fsHandler(Rm), fsReq{"path": "/", "recursive": true}).failed(t, protocol.CodeFsBadRequest, "/")
}

func TestFsChmod(t *testing.T) {
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	fsPutFile(t, filepath.Join(tree, "a.sh"), "#!/bin/sh", 0o644)
	fsPutFile(t, filepath.Join(tree, "sub", "b"), "b", 0o600)
	target := filepath.Join(dir, "target")
	fsPutFile(t, target, "t", 0o600)
	os.Symlink(target, filepath.Join(tree, "link"))

	var res struct{ Updated int }
	fsCall(t, fsHandler(Chmod), fsReq{"path": filepath.Join(tree, "a.sh"), "mode": "4755"}).ok(t, &res)
	if res.Updated != 1 || fsPerm(t, filepath.Join(tree, "a.sh")) != 0o4755 {
		t.Fatalf("updated %d mode %o", res.Updated, fsPerm(t, filepath.Join(tree, "a.sh")))
	}
	// Recursive, mode only: tree, a.sh, sub, sub/b count; the link is skipped.
	fsCall(t, fsHandler(Chmod), fsReq{"path": tree, "mode": "0750", "recursive": true}).ok(t, &res)
	if res.Updated != 4 {
		t.Fatalf("updated %d, want 4", res.Updated)
	}
	for _, p := range []string{tree, filepath.Join(tree, "sub"), filepath.Join(tree, "sub", "b")} {
		if fsPerm(t, p) != 0o750 {
			t.Errorf("%s mode %o", p, fsPerm(t, p))
		}
	}
	if fsPerm(t, target) != 0o600 {
		t.Fatal("chmod followed the symlink")
	}

	fsCall(t, fsHandler(Chmod), fsReq{"path": tree}).failed(t, protocol.CodeFsBadRequest, tree)
	fsCall(t, fsHandler(Chmod), fsReq{"path": tree, "uid": -3}).failed(t, protocol.CodeFsBadRequest, tree)
	missing := filepath.Join(dir, "missing")
	fsCall(t, fsHandler(Chmod), fsReq{"path": missing, "mode": "0644"}).failed(t, protocol.CodeFsNotFound, missing)

	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	// Owner changes apply to links themselves (lchown), and count them.
	fsCall(t, fsHandler(Chmod), fsReq{"path": tree, "uid": 1234, "gid": 4321, "recursive": true}).ok(t, &res)
	if res.Updated != 5 {
		t.Fatalf("updated %d, want 5", res.Updated)
	}
	var st syscall.Stat_t
	syscall.Lstat(filepath.Join(tree, "link"), &st)
	if st.Uid != 1234 || st.Gid != 4321 {
		t.Fatalf("link owner %d:%d", st.Uid, st.Gid)
	}
	syscall.Lstat(target, &st)
	if st.Uid == 1234 {
		t.Fatal("chown followed the symlink")
	}
	// Only gid: uid unchanged.
	fsCall(t, fsHandler(Chmod), fsReq{"path": target, "gid": 77}).ok(t, &res)
	syscall.Lstat(target, &st)
	if st.Gid != 77 || st.Uid != uint32(os.Geteuid()) {
		t.Fatalf("owner %d:%d", st.Uid, st.Gid)
	}
}
