package fsops

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"krunbox/agent/protocol"
)

type fsSedResponse struct {
	Results           []protocol.SedResult `json:"results"`
	TotalReplacements int64                `json:"totalReplacements"`
}

func fsSedCall(t *testing.T, req fsReq) fsSedResponse {
	t.Helper()
	var res fsSedResponse
	fsCall(t, fsHandler(Sed), req).ok(t, &res)
	return res
}

func fsInode(t *testing.T, p string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func TestFsSedFilesFormWithCaptures(t *testing.T) {
	dir := t.TempDir()
	a, b, c := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c")
	fsPutFile(t, a, "mail bob@example and ann@test\nnone here\r\nlast eve@x", 0o640)
	fsPutFile(t, b, "nothing to change\n", 0o600)
	fsPutFile(t, c, "x bob@example\n", 0o2755)
	bIno := fsInode(t, b)

	res := fsSedCall(t, fsReq{"files": []string{a, b, c, a}, "pattern": `(\w+)@(?P<host>\w+)`, "replacement": "${host}_$1"})
	want := "mail example_bob and test_ann\nnone here\r\nlast x_eve"
	if got := fsGetFile(t, a); got != want {
		t.Fatalf("a: %q", got)
	}
	if len(res.Results) != 3 || res.TotalReplacements != 4 {
		t.Fatalf("%+v", res)
	}
	if r := res.Results[0]; r.Path != a || r.Replacements != 3 || !r.Success || r.Error != "" {
		t.Errorf("a result %+v", r)
	}
	if r := res.Results[1]; r.Path != b || r.Replacements != 0 || !r.Success {
		t.Errorf("b result %+v", r)
	}
	if fsPerm(t, a) != 0o640 || fsPerm(t, c) != 0o2755 || fsGetFile(t, c) != "x example_bob\n" {
		t.Errorf("modes %o %o", fsPerm(t, a), fsPerm(t, c))
	}
	if fsInode(t, b) != bIno {
		t.Error("an unchanged file was rewritten")
	}
	if left := fsTempLeftovers(t, dir); len(left) != 0 {
		t.Fatalf("temp left %v", left)
	}
}

func TestFsSedOptions(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	cases := []struct {
		name, in string
		req      fsReq
		out      string
		n        int64
	}{
		{"firstOnly per line", "a a a\na a", fsReq{"pattern": "a", "replacement": "b", "firstOnly": true}, "b a a\nb a", 2},
		{"literal", "a.b axb (x)", fsReq{"pattern": "a.b", "replacement": "$1", "regex": false}, "$1 axb (x)", 1},
		{"literal parens", "f(x) f(y)", fsReq{"pattern": "f(", "replacement": "g(", "regex": false}, "g(x) g(y)", 2},
		{"ignoreCase", "Foo FOO foo", fsReq{"pattern": "foo", "replacement": "bar", "ignoreCase": true}, "bar bar bar", 3},
		{"no match across lines", "foo\nbar\n", fsReq{"pattern": `foo\nbar`, "replacement": "x"}, "foo\nbar\n", 0},
		{"dollar-dollar", "cost 5", fsReq{"pattern": `(\d)`, "replacement": "$$$1"}, "cost $5", 1},
		{"empty matches", "abc", fsReq{"pattern": "x*", "replacement": "-"}, "-a-b-c-", 4},
		{"newline in replacement", "a;b", fsReq{"pattern": ";", "replacement": "\n"}, "a\nb", 1},
		{"anchors are per line", "ab\nab\n", fsReq{"pattern": "^a", "replacement": "X"}, "Xb\nXb\n", 2},
	}
	for _, tc := range cases {
		fsPutFile(t, f, tc.in, 0o644)
		tc.req["files"] = []string{f}
		res := fsSedCall(t, tc.req)
		if got := fsGetFile(t, f); got != tc.out || res.TotalReplacements != tc.n {
			t.Errorf("%s: %q, %d replacements; want %q, %d", tc.name, got, res.TotalReplacements, tc.out, tc.n)
		}
	}
}

// Form and regex errors come before any file is touched.
func TestFsSedRejectsBeforeTouching(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	fsPutFile(t, f, "foo\n", 0o644)
	fsCall(t, fsHandler(Sed), fsReq{"files": []string{f}, "path": dir, "pattern": "foo", "replacement": "x"}).failed(t, protocol.CodeFsBadRequest, "")
	fsCall(t, fsHandler(Sed), fsReq{"pattern": "foo", "replacement": "x"}).failed(t, protocol.CodeFsBadRequest, "")
	fsCall(t, fsHandler(Sed), fsReq{"files": []string{}, "pattern": "foo"}).failed(t, protocol.CodeFsBadRequest, "")
	fsCall(t, fsHandler(Sed), fsReq{"files": []string{f, "relative"}, "pattern": "foo"}).failed(t, protocol.CodeFsBadRequest, "relative")
	fsCall(t, fsHandler(Sed), fsReq{"files": []string{f}, "pattern": "fo(o", "replacement": "x"}).failed(t, protocol.CodeFsBadRegex, f)
	fsCall(t, fsHandler(Sed), fsReq{"path": dir, "pattern": "[z-a]", "replacement": "x"}).failed(t, protocol.CodeFsBadRegex, dir)
	fsCall(t, fsHandler(Sed), fsReq{"files": []string{f}, "pattern": ""}).failed(t, protocol.CodeFsBadRequest, f)
	fsCall(t, fsHandler(Sed), fsReq{"path": dir, "recursive": false, "pattern": "foo"}).failed(t, protocol.CodeFsBadRequest, dir)
	if fsGetFile(t, f) != "foo\n" {
		t.Fatal("a rejected request changed a file")
	}
}

func TestFsSedPerFileErrorsDoNotStopOthers(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing")
	target := filepath.Join(dir, "target")
	fsPutFile(t, target, "foo\n", 0o644)
	link := filepath.Join(dir, "link")
	os.Symlink(target, link)
	bin := filepath.Join(dir, "bin")
	fsPutFile(t, bin, "foo\x00foo\n", 0o644)
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o755)

	res := fsSedCall(t, fsReq{"files": []string{missing, link, bin, sub, target}, "pattern": "foo", "replacement": "bar"})
	if len(res.Results) != 5 || res.TotalReplacements != 1 {
		t.Fatalf("%+v", res)
	}
	checks := []struct{ prefix string }{{"S211: " + missing}, {"S212: " + link}, {""}, {"S212: " + sub}, {""}}
	for i, c := range checks {
		r := res.Results[i]
		if c.prefix == "" {
			if !r.Success || r.Error != "" {
				t.Errorf("result %d %+v", i, r)
			}
		} else if r.Success || !strings.HasPrefix(r.Error, c.prefix) {
			t.Errorf("result %d %+v, want error %q", i, r, c.prefix)
		}
	}
	if fsGetFile(t, bin) != "foo\x00foo\n" || fsGetFile(t, target) != "bar\n" {
		t.Fatal("binary edited or the good file not")
	}
}

func TestFsSedPathForm(t *testing.T) {
	root := t.TempDir()
	fsPutFile(t, filepath.Join(root, "a.rs"), "old\n", 0o644)
	fsPutFile(t, filepath.Join(root, "b.py"), "nothing\n", 0o644)
	fsPutFile(t, filepath.Join(root, "src", "c.rs"), "old old\n", 0o644)
	fsPutFile(t, filepath.Join(root, "target", "d.rs"), "old\n", 0o644)
	fsPutFile(t, filepath.Join(root, "notes.txt"), "old\n", 0o644)
	outside := t.TempDir()
	fsPutFile(t, filepath.Join(outside, "e.rs"), "old\n", 0o644)
	os.Symlink(outside, filepath.Join(root, "link"))

	res := fsSedCall(t, fsReq{"path": root, "include": []string{"*.rs", "*.py"}, "exclude": []string{"target/*"},
		"pattern": "old", "replacement": "new"})
	if len(res.Results) != 2 || res.TotalReplacements != 3 {
		t.Fatalf("%+v", res)
	}
	if res.Results[0].Path != filepath.Join(root, "a.rs") || res.Results[1].Path != filepath.Join(root, "src", "c.rs") {
		t.Fatalf("%+v", res.Results)
	}
	if fsGetFile(t, filepath.Join(root, "target", "d.rs")) != "old\n" || fsGetFile(t, filepath.Join(root, "notes.txt")) != "old\n" ||
		fsGetFile(t, filepath.Join(outside, "e.rs")) != "old\n" {
		t.Fatal("sed edited an excluded or linked file")
	}
	// A file as path.
	one := filepath.Join(root, "notes.txt")
	res = fsSedCall(t, fsReq{"path": one, "pattern": "old", "replacement": "new"})
	if len(res.Results) != 1 || fsGetFile(t, one) != "new\n" {
		t.Fatalf("%+v", res)
	}
}

func TestFsSedLargeFileChangedAtTheEnd(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "big")
	var b strings.Builder
	for i := 0; i < 100000; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	b.WriteString("the end")
	fsPutFile(t, f, b.String(), 0o644)
	res := fsSedCall(t, fsReq{"files": []string{f}, "pattern": "^the (end)$", "replacement": "THE ${1}"})
	want := strings.TrimSuffix(b.String(), "the end") + "THE end"
	if res.TotalReplacements != 1 || fsGetFile(t, f) != want {
		t.Fatalf("%+v", res)
	}
}
