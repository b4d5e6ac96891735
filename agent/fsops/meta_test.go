package fsops

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"krunbox/agent/protocol"
)

func fsPutFile(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Chmod(p, uint32(mode)); err != nil { // raw bits: 04755 means setuid

		t.Fatal(err)
	}
}

func fsGetFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestFsLsListsSortedEntriesWithoutFollowingLinks(t *testing.T) {
	dir := t.TempDir()
	fsPutFile(t, filepath.Join(dir, "b.txt"), "hello", 0o640)
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	os.Symlink("/etc", filepath.Join(dir, "a-link")) // points outside: just a link
	before := time.Now().Add(-2 * time.Second).UnixMilli()

	var res struct {
		Entries   []protocol.FsEntry `json:"entries"`
		Truncated bool               `json:"truncated"`
	}
	fsCall(t, fsHandler(Ls), fsReq{"path": dir}).ok(t, &res)
	if len(res.Entries) != 3 || res.Truncated {
		t.Fatalf("entries %+v", res)
	}
	link, file, sub := res.Entries[0], res.Entries[1], res.Entries[2]
	if link.Name != "a-link" || !link.IsSymlink || link.IsDir {
		t.Errorf("link entry %+v", link)
	}
	if file.Name != "b.txt" || file.Size != 5 || file.Mode != 0o640 || file.IsDir || file.IsSymlink || file.Mtime < before {
		t.Errorf("file entry %+v", file)
	}
	if sub.Name != "sub" || !sub.IsDir {
		t.Errorf("dir entry %+v", sub)
	}
}

func TestFsLsErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	fsPutFile(t, file, "x", 0o644)
	link := filepath.Join(dir, "link-to-dir")
	os.Symlink(dir, link)
	missing := filepath.Join(dir, "missing")

	fsCall(t, fsHandler(Ls), fsReq{"path": file}).failed(t, protocol.CodeFsWrongType, file)
	fsCall(t, fsHandler(Ls), fsReq{"path": missing}).failed(t, protocol.CodeFsNotFound, missing)
	oe := fsCall(t, fsHandler(Ls), fsReq{"path": link}).failed(t, protocol.CodeFsWrongType, link)
	if !strings.Contains(oe.Message, "symlink") {
		t.Errorf("message %q should say it is a symlink", oe.Message)
	}
	fsCall(t, fsHandler(Ls), fsReq{"path": filepath.Join(file, "below")}).failed(t, protocol.CodeFsWrongType, filepath.Join(file, "below"))
}

func TestFsStat(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f.txt")
	fsPutFile(t, file, "12345678", 0o4755)
	var e protocol.FsEntry
	fsCall(t, fsHandler(Stat), fsReq{"path": file + "/"}).ok(t, &e) // trailing slash is cleaned away
	if e.Name != "f.txt" || e.Size != 8 || e.Mode != 0o4755 || e.IsDir {
		t.Errorf("stat %+v", e)
	}
	dangling := filepath.Join(dir, "dangling")
	os.Symlink(filepath.Join(dir, "nowhere"), dangling)
	fsCall(t, fsHandler(Stat), fsReq{"path": dangling}).ok(t, &e)
	if !e.IsSymlink || e.Name != "dangling" {
		t.Errorf("stat of a dangling link %+v", e)
	}
	missing := filepath.Join(dir, "nope")
	oe := fsCall(t, fsHandler(Stat), fsReq{"path": missing}).failed(t, protocol.CodeFsNotFound, missing)
	if oe.Errno != "ENOENT" {
		t.Errorf("errno %q", oe.Errno)
	}
	fsCall(t, fsHandler(Stat), fsReq{"path": "/"}).ok(t, &e)
	if e.Name != "/" || !e.IsDir {
		t.Errorf("stat / %+v", e)
	}
}

// Every op refuses empty, relative, NUL-carrying and ".." paths with S210 naming them.
func TestFsPathValidation(t *testing.T) {
	ops := []struct {
		name  string
		h     protocol.Handler
		field string
		extra fsReq
	}{
		{"ls", fsHandler(Ls), "path", nil}, {"stat", fsHandler(Stat), "path", nil}, {"mkdir", fsHandler(Mkdir), "path", nil},
		{"write", fsHandler(Write), "path", nil}, {"read", fsHandler(Read), "path", nil}, {"rm", fsHandler(Rm), "path", nil},
		{"chmod", fsHandler(Chmod), "path", fsReq{"mode": "0644"}}, {"mv-src", fsHandler(Mv), "src", fsReq{"dst": "/tmp/x"}},
		{"mv-dst", fsHandler(Mv), "dst", fsReq{"src": "/tmp"}}, {"grep", fsHandler(Grep), "path", fsReq{"pattern": "x"}},
		{"sed", fsHandler(Sed), "path", fsReq{"pattern": "x"}}, {"tarCreate", fsHandler(TarCreate), "path", nil},
		{"tarExtract", fsHandler(TarExtract), "path", nil},
	}
	for _, op := range ops {
		for _, bad := range []string{"relative/p", "/a/\x00b", "/a/../etc"} {
			req := fsReq{op.field: bad}
			for k, v := range op.extra {
				req[k] = v
			}
			s := fsCall(t, op.h, req)
			if s.failure == nil || s.failure.Code != protocol.CodeFsBadRequest {
				t.Errorf("%s %q: got %+v", op.name, bad, s.failure)
				continue
			}
			if !strings.Contains(s.failure.Message, strings.ReplaceAll(bad, "\x00", `\x00`)) {
				t.Errorf("%s: message %q does not name %q", op.name, s.failure.Message, bad)
			}
		}
		req := fsReq{op.field: ""}
		for k, v := range op.extra {
			req[k] = v
		}
		if s := fsCall(t, op.h, req); s.failure == nil || s.failure.Code != protocol.CodeFsBadRequest {
			t.Errorf("%s with an empty path: %+v", op.name, s.failure)
		}
	}
	// Malformed field types are S210 too.
	if s := fsCall(t, fsHandler(Ls), fsReq{"path": 5}); s.failure == nil || s.failure.Code != protocol.CodeFsBadRequest {
		t.Errorf("numeric path: %+v", s.failure)
	}
}

func TestFsErrnoMapping(t *testing.T) {
	cases := map[string]string{"ENOENT": "S211", "ENOTDIR": "S212", "EISDIR": "S212", "EEXIST": "S213",
		"ENOTEMPTY": "S214", "EACCES": "S215", "EPERM": "S215", "EIO": "S216", "ENOSPC": "S216", "EDQUOT": "S216"}
	for errno, name := range errnoNames {
		want, listed := cases[name]
		if !listed {
			continue
		}
		oe := fsError(&os.PathError{Op: "x", Path: "/p/q", Err: errno}, "/other")
		if oe.Code != want || oe.Path != "/p/q" || !strings.HasPrefix(oe.Message, "/p/q: ") || oe.Errno != name {
			t.Errorf("%s → %+v, want %s", name, oe, want)
		}
		delete(cases, name)
	}
	if len(cases) != 0 {
		t.Errorf("errnos missing from the table: %v", cases)
	}
}
