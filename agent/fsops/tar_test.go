package fsops

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"krunbox/agent/protocol"
)

type fsTarItem struct {
	h    tar.Header
	body string
}

func fsReadTar(t *testing.T, b []byte) []fsTarItem {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(b))
	var items []fsTarItem
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return items
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		items = append(items, fsTarItem{*h, string(body)})
	}
}

type fsTarEntry struct {
	name, link, body string
	typ              byte
	mode             int64
}

func fsMakeTar(t *testing.T, entries ...fsTarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: mode, Size: int64(len(e.body)),
			ModTime: time.Unix(1700000000, 0)}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(e.body))
	}
	tw.Close()
	return buf.Bytes()
}

// chunks splits b like a host sending DATA frames.
func fsChunks(b []byte, size int) [][]byte {
	var out [][]byte
	for len(b) > size {
		out = append(out, b[:size])
		b = b[size:]
	}
	return append(out, b)
}

func TestFsTarCreate(t *testing.T) {
	root := t.TempDir()
	fsPutFile(t, filepath.Join(root, "b.txt"), "bee", 0o640)
	fsPutFile(t, filepath.Join(root, "sub", "c.sh"), "#!/bin/sh\n", 0o755)
	os.Mkdir(filepath.Join(root, "empty"), 0o700)
	os.Symlink("/etc/passwd", filepath.Join(root, "a-link"))
	os.Link(filepath.Join(root, "b.txt"), filepath.Join(root, "sub", "hard"))
	syscall.Mkfifo(filepath.Join(root, "fifo"), 0o600)

	s := fsCall(t, fsHandler(TarCreate), fsReq{"path": root})
	var res struct{ Bytes int64 }
	s.ok(t, &res)
	if res.Bytes != int64(s.data.Len()) || res.Bytes%512 != 0 {
		t.Fatalf("bytes %d, data %d", res.Bytes, s.data.Len())
	}
	items := fsReadTar(t, s.data.Bytes())
	var names []string
	for _, it := range items {
		names = append(names, it.h.Name)
	}
	if got := strings.Join(names, ","); got != "a-link,b.txt,empty/,fifo,sub/,sub/c.sh,sub/hard" {
		t.Fatalf("names %s", got)
	}
	byName := map[string]fsTarItem{}
	for _, it := range items {
		byName[it.h.Name] = it
	}
	if it := byName["a-link"]; it.h.Typeflag != tar.TypeSymlink || it.h.Linkname != "/etc/passwd" {
		t.Errorf("link %+v", it.h)
	}
	if it := byName["b.txt"]; it.h.Typeflag != tar.TypeReg || it.body != "bee" || it.h.Mode != 0o640 {
		t.Errorf("file %+v %q", it.h, it.body)
	}
	if it := byName["sub/hard"]; it.h.Typeflag != tar.TypeLink || it.h.Linkname != "b.txt" {
		t.Errorf("hard link %+v", it.h)
	}
	if it := byName["empty/"]; it.h.Typeflag != tar.TypeDir || it.h.Mode != 0o700 {
		t.Errorf("dir %+v", it.h)
	}
	if it := byName["fifo"]; it.h.Typeflag != tar.TypeFifo {
		t.Errorf("fifo %+v", it.h)
	}

	// A single file is archived under its base name.
	s = fsCall(t, fsHandler(TarCreate), fsReq{"path": filepath.Join(root, "sub", "c.sh")})
	items = fsReadTar(t, s.data.Bytes())
	if len(items) != 1 || items[0].h.Name != "c.sh" || items[0].body != "#!/bin/sh\n" {
		t.Fatalf("%+v", items)
	}
	missing := filepath.Join(root, "missing")
	fsCall(t, fsHandler(TarCreate), fsReq{"path": missing}).failed(t, protocol.CodeFsNotFound, missing)
}

func TestFsTarRoundTrip(t *testing.T) {
	src := t.TempDir()
	fsPutFile(t, filepath.Join(src, "top.txt"), strings.Repeat("data ", 100000), 0o600)
	fsPutFile(t, filepath.Join(src, "ro", "inner.txt"), "inside a read-only dir", 0o444)
	os.Chmod(filepath.Join(src, "ro"), 0o555)
	defer os.Chmod(filepath.Join(src, "ro"), 0o755)
	os.Symlink("../top.txt", filepath.Join(src, "ro-link"))
	old := time.Unix(1600000000, 0)
	os.Chtimes(filepath.Join(src, "top.txt"), old, old)

	s := fsCall(t, fsHandler(TarCreate), fsReq{"path": src})
	s.ok(t, nil)
	dst := filepath.Join(t.TempDir(), "new", "place") // created with its parents
	var res struct{ Entries int }
	fsCall(t, fsHandler(TarExtract), fsReq{"path": dst}, fsChunks(s.data.Bytes(), 10000)...).ok(t, &res)
	defer os.Chmod(filepath.Join(dst, "ro"), 0o755)
	if res.Entries != 4 {
		t.Fatalf("entries %d", res.Entries)
	}
	if fsGetFile(t, filepath.Join(dst, "top.txt")) != strings.Repeat("data ", 100000) || fsPerm(t, filepath.Join(dst, "top.txt")) != 0o600 {
		t.Fatal("top.txt")
	}
	if fi, _ := os.Stat(filepath.Join(dst, "top.txt")); !fi.ModTime().Equal(old) {
		t.Errorf("mtime %v", fi.ModTime())
	}
	if fsGetFile(t, filepath.Join(dst, "ro", "inner.txt")) != "inside a read-only dir" || fsPerm(t, filepath.Join(dst, "ro")) != 0o555 {
		t.Fatal("read-only dir")
	}
	if l, _ := os.Readlink(filepath.Join(dst, "ro-link")); l != "../top.txt" {
		t.Fatalf("link %q", l)
	}
	if left := fsTempLeftovers(t, dst); len(left) != 0 {
		t.Fatalf("temp left %v", left)
	}
}

func TestFsTarExtractReplacesAndMerges(t *testing.T) {
	dst := t.TempDir()
	fsPutFile(t, filepath.Join(dst, "d", "keep"), "kept", 0o644)
	fsPutFile(t, filepath.Join(dst, "d", "f"), "old", 0o644)
	archive := fsMakeTar(t,
		fsTarEntry{name: "./", typ: tar.TypeDir, mode: 0o755},
		fsTarEntry{name: "./d/", typ: tar.TypeDir, mode: 0o750},
		fsTarEntry{name: "./d/f", typ: tar.TypeReg, body: "new"},
		fsTarEntry{name: "implicit/parent/file", typ: tar.TypeReg, body: "x"},
		fsTarEntry{name: "implicit/hard", typ: tar.TypeLink, link: "implicit/parent/file"},
		fsTarEntry{name: "out", typ: tar.TypeSymlink, link: "/etc"},
	)
	var res struct{ Entries int }
	fsCall(t, fsHandler(TarExtract), fsReq{"path": dst}, archive).ok(t, &res)
	if res.Entries != 5 || fsGetFile(t, filepath.Join(dst, "d", "keep")) != "kept" || fsGetFile(t, filepath.Join(dst, "d", "f")) != "new" {
		t.Fatalf("entries %d", res.Entries)
	}
	if fsPerm(t, filepath.Join(dst, "d")) != 0o750 {
		t.Errorf("merged dir mode %o", fsPerm(t, filepath.Join(dst, "d")))
	}
	if fsInode(t, filepath.Join(dst, "implicit", "hard")) != fsInode(t, filepath.Join(dst, "implicit", "parent", "file")) {
		t.Error("hard link not linked")
	}
	file := filepath.Join(dst, "d", "f")
	fsCall(t, fsHandler(TarExtract), fsReq{"path": file}, archive).failed(t, protocol.CodeFsWrongType, file)
}

func TestFsTarExtractRefusesEscapes(t *testing.T) {
	outside := t.TempDir()
	fsPutFile(t, filepath.Join(outside, "victim"), "safe", 0o644)
	cases := []struct {
		name    string
		entries []fsTarEntry
		code    string
	}{
		{"dotdot", []fsTarEntry{{name: "ok.txt", typ: tar.TypeReg, body: "x"}, {name: "../evil", typ: tar.TypeReg, body: "x"}}, protocol.CodeFsBadRequest},
		{"nested dotdot", []fsTarEntry{{name: "a/ok", typ: tar.TypeReg}, {name: "a/../../evil", typ: tar.TypeReg}}, protocol.CodeFsBadRequest},
		{"absolute", []fsTarEntry{{name: "/abs/evil", typ: tar.TypeReg, body: "x"}}, protocol.CodeFsBadRequest},
		{"hard link out", []fsTarEntry{{name: "h", typ: tar.TypeLink, link: "../outside"}}, protocol.CodeFsBadRequest},
		{"through a symlink", []fsTarEntry{{name: "ln", typ: tar.TypeSymlink, link: outside}, {name: "ln/victim", typ: tar.TypeReg, body: "pwned"}}, protocol.CodeFsWrongType},
		{"through a symlink dir entry", []fsTarEntry{{name: "ln", typ: tar.TypeSymlink, link: outside}, {name: "ln/sub/", typ: tar.TypeDir}}, protocol.CodeFsWrongType},
	}
	for _, tc := range cases {
		dst := filepath.Join(t.TempDir(), "dst")
		s := fsCall(t, fsHandler(TarExtract), fsReq{"path": dst}, fsMakeTar(t, tc.entries...))
		if s.failure == nil || s.failure.Code != tc.code {
			t.Errorf("%s: %+v", tc.name, s.failure)
			continue
		}
		if _, err := os.Lstat(dst); !os.IsNotExist(err) {
			t.Errorf("%s: the failed extraction left %s behind", tc.name, dst)
		}
	}
	if fsGetFile(t, filepath.Join(outside, "victim")) != "safe" {
		t.Fatal("wrote outside the target")
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Fatalf("outside has %d entries", len(entries))
	}
}

func TestFsTarExtractAbortAndCorruption(t *testing.T) {
	dst := t.TempDir()
	fsPutFile(t, filepath.Join(dst, "existing"), "before", 0o644)
	archive := fsMakeTar(t,
		fsTarEntry{name: "first", typ: tar.TypeReg, body: "1"},
		fsTarEntry{name: "dir/", typ: tar.TypeDir},
		fsTarEntry{name: "dir/big", typ: tar.TypeReg, body: strings.Repeat("z", 100000)},
		fsTarEntry{name: "existing", typ: tar.TypeReg, body: "after"},
	)
	s := newFsFakeStream(archive[:20000]) // stops inside dir/big
	s.abortErr = &protocol.OpError{Code: protocol.CodeFsAborted, Message: "stream cancelled by host"}
	fsCallOn(t, s, fsHandler(TarExtract), fsReq{"path": dst}).failed(t, protocol.CodeFsAborted, dst)
	entries, _ := os.ReadDir(dst)
	if len(entries) != 1 || entries[0].Name() != "existing" || fsGetFile(t, filepath.Join(dst, "existing")) != "before" {
		t.Fatalf("after abort: %v", entries)
	}
	// Truncated and garbage streams are S210, with the same cleanup.
	fsCall(t, fsHandler(TarExtract), fsReq{"path": dst}, archive[:20000]).failed(t, protocol.CodeFsBadRequest, dst)
	fsCall(t, fsHandler(TarExtract), fsReq{"path": dst}, bytes.Repeat([]byte("garbage!"), 200)).failed(t, protocol.CodeFsBadRequest, dst)
	if entries, _ := os.ReadDir(dst); len(entries) != 1 {
		t.Fatalf("after corrupt streams: %v", entries)
	}
}
