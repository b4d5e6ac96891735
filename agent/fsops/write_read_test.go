package fsops

import (
	"bytes"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"krunbox/agent/protocol"
)

// tempLeftovers lists krunbox temp files in dir.
func fsTempLeftovers(t *testing.T, dir string) []string {
	t.Helper()
	var found []string
	filepath.Walk(dir, func(p string, _ os.FileInfo, _ error) error {
		if strings.Contains(filepath.Base(p), TempMarker) {
			found = append(found, p)
		}
		return nil
	})
	return found
}

func TestFsWriteCreatesAndReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)

	p := filepath.Join(dir, "hello.txt")
	var res struct{ Bytes int64 }
	fsCall(t, fsHandler(Write), fsReq{"path": p}, []byte("hello "), []byte{}, []byte("world")).ok(t, &res)
	if res.Bytes != 11 || fsGetFile(t, p) != "hello world" || fsPerm(t, p) != 0o644 {
		t.Fatalf("bytes %d content %q mode %o", res.Bytes, fsGetFile(t, p), fsPerm(t, p))
	}
	fsCall(t, fsHandler(Write), fsReq{"path": p, "mode": "0600"}, []byte("new")).ok(t, &res)
	if fsGetFile(t, p) != "new" || fsPerm(t, p) != 0o600 {
		t.Fatalf("content %q mode %o", fsGetFile(t, p), fsPerm(t, p))
	}
	empty := filepath.Join(dir, "empty")
	fsCall(t, fsHandler(Write), fsReq{"path": empty}).ok(t, &res)
	if res.Bytes != 0 || fsGetFile(t, empty) != "" {
		t.Fatal("empty upload")
	}
	if left := fsTempLeftovers(t, dir); len(left) != 0 {
		t.Fatalf("temp files left: %v", left)
	}
}

func TestFsWriteReplacesASymlinkWithoutFollowingIt(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	fsPutFile(t, target, "target stays", 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink(target, link)
	fsCall(t, fsHandler(Write), fsReq{"path": link}, []byte("file now")).ok(t, nil)
	fi, _ := os.Lstat(link)
	if !fi.Mode().IsRegular() || fsGetFile(t, link) != "file now" || fsGetFile(t, target) != "target stays" {
		t.Fatal("write followed the link")
	}
}

func TestFsWriteAbortLeavesOriginalAndNoTemp(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "data.bin")
	fsPutFile(t, p, "original bytes", 0o640)

	s := newFsFakeStream([]byte("partial "), []byte("upload"))
	s.abortErr = &protocol.OpError{Code: protocol.CodeFsAborted, Message: "stream cancelled by host"}
	fsCallOn(t, s, fsHandler(Write), fsReq{"path": p}).failed(t, protocol.CodeFsAborted, p)
	if fsGetFile(t, p) != "original bytes" || fsPerm(t, p) != 0o640 {
		t.Fatal("original changed by an aborted upload")
	}
	if left := fsTempLeftovers(t, dir); len(left) != 0 {
		t.Fatalf("temp files left: %v", left)
	}
	// A new file aborted mid-way does not appear at all.
	fresh := filepath.Join(dir, "fresh")
	s = newFsFakeStream([]byte("abc"))
	s.abortErr = &protocol.OpError{Code: protocol.CodeFsAborted, Message: "connection lost"}
	fsCallOn(t, s, fsHandler(Write), fsReq{"path": fresh}).failed(t, protocol.CodeFsAborted, fresh)
	if _, err := os.Lstat(fresh); !os.IsNotExist(err) || len(fsTempLeftovers(t, dir)) != 0 {
		t.Fatal("aborted upload left something")
	}
}

func TestFsWriteErrors(t *testing.T) {
	dir := t.TempDir()
	nested := filepath.Join(dir, "no", "such", "f")
	fsCall(t, fsHandler(Write), fsReq{"path": nested}, []byte("x")).failed(t, protocol.CodeFsNotFound, nested)
	fsCall(t, fsHandler(Write), fsReq{"path": nested, "parents": true, "mode": 0o600}, []byte("x")).ok(t, nil)
	if fsGetFile(t, nested) != "x" {
		t.Fatal("parents:true")
	}
	fsCall(t, fsHandler(Write), fsReq{"path": dir}, []byte("x")).failed(t, protocol.CodeFsWrongType, dir)
	file := filepath.Join(dir, "plain")
	fsPutFile(t, file, "", 0o644)
	below := filepath.Join(file, "child")
	fsCall(t, fsHandler(Write), fsReq{"path": below}, []byte("x")).failed(t, protocol.CodeFsWrongType, below)
	fsCall(t, fsHandler(Write), fsReq{"path": filepath.Join(dir, "m"), "mode": "rw"}).failed(t, protocol.CodeFsBadRequest, "")
	if left := fsTempLeftovers(t, dir); len(left) != 0 {
		t.Fatalf("temp files left: %v", left)
	}
}

func TestFsWriteThenReadBigFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "big")
	content := make([]byte, 5<<20+123)
	rand.New(rand.NewSource(1)).Read(content)
	var chunks [][]byte
	for off := 0; off < len(content); off += 64 << 10 {
		end := off + 64<<10
		if end > len(content) {
			end = len(content)
		}
		chunks = append(chunks, content[off:end])
	}
	fsCall(t, fsHandler(Write), fsReq{"path": p, "mode": "0755"}, chunks...).ok(t, nil)

	s := fsCall(t, fsHandler(Read), fsReq{"path": p})
	var res struct{ Bytes int64 }
	s.ok(t, &res)
	if res.Bytes != int64(len(content)) || !bytes.Equal(s.data.Bytes(), content) {
		t.Fatalf("read %d bytes, equal=%v", res.Bytes, bytes.Equal(s.data.Bytes(), content))
	}
	if want := (len(content) + protocol.DataChunk - 1) / protocol.DataChunk; s.dataFrames != want {
		t.Errorf("%d DATA frames, want %d of 256 KiB", s.dataFrames, want)
	}
	if len(s.events) != 1 {
		t.Fatalf("events %v", s.events)
	}
	meta := s.events[0]
	fi, _ := os.Stat(p)
	if meta["type"] != "meta" || meta["size"] != float64(len(content)) || meta["mode"] != float64(0o755) ||
		meta["mtime"] != float64(fi.ModTime().UnixMilli()) {
		t.Errorf("meta %v", meta)
	}
}

func TestFsReadKeepsTheDescriptorWhileStreaming(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	orig := bytes.Repeat([]byte("A"), 3*protocol.DataChunk)
	os.WriteFile(p, orig, 0o644)
	s := newFsFakeStream()
	s.onSend = func(frame int) {
		if frame == 1 { // replace the path mid-stream: the bytes still come from the open file
			os.WriteFile(p+".new", []byte("B"), 0o644)
			os.Rename(p+".new", p)
		}
	}
	fsCallOn(t, s, fsHandler(Read), fsReq{"path": p}).ok(t, nil)
	if !bytes.Equal(s.data.Bytes(), orig) {
		t.Fatalf("got %d bytes", s.data.Len())
	}
}

func TestFsReadErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	fsCall(t, fsHandler(Read), fsReq{"path": missing}).failed(t, protocol.CodeFsNotFound, missing)
	fsCall(t, fsHandler(Read), fsReq{"path": dir}).failed(t, protocol.CodeFsWrongType, dir)
	file := filepath.Join(dir, "f")
	fsPutFile(t, file, "content", 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink(file, link)
	fsCall(t, fsHandler(Read), fsReq{"path": link}).failed(t, protocol.CodeFsWrongType, link)
	fifo := filepath.Join(dir, "fifo")
	syscall.Mkfifo(fifo, 0o644)
	fsCall(t, fsHandler(Read), fsReq{"path": fifo}).failed(t, protocol.CodeFsWrongType, fifo)

	// The host going away mid-stream ends the handler without a final frame.
	big := filepath.Join(dir, "big")
	os.WriteFile(big, make([]byte, 4*protocol.DataChunk), 0o644)
	s := newFsFakeStream()
	s.failSendAt = 2
	fsCallOn(t, s, fsHandler(Read), fsReq{"path": big})
	if s.finals != 0 || s.dataFrames != 2 {
		t.Fatalf("finals %d frames %d", s.finals, s.dataFrames)
	}
}
