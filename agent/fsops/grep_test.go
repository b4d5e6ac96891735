package fsops

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"krunbox/agent/protocol"
)

type fsGrepResult struct {
	Matches   []protocol.GrepMatch `json:"matches"`
	Truncated bool                 `json:"truncated"`
}

func fsGrepCall(t *testing.T, req fsReq) fsGrepResult {
	t.Helper()
	var res fsGrepResult
	fsCall(t, fsHandler(Grep), req).ok(t, &res)
	return res
}

func fsMatchList(res fsGrepResult, root string) string {
	var b strings.Builder
	for _, m := range res.Matches {
		fmt.Fprintf(&b, "%s:%d:%s\n", strings.TrimPrefix(m.Path, root+"/"), m.Line, m.Content)
	}
	return b.String()
}

func TestFsGrepWalksSortedWithGlobs(t *testing.T) {
	root := t.TempDir()
	fsPutFile(t, filepath.Join(root, "b.go"), "package b\n// TODO(ann): fix\n", 0o644)
	fsPutFile(t, filepath.Join(root, "a.txt"), "todo lower\nTODO(bob): one\nTODO(bob): two", 0o644)
	fsPutFile(t, filepath.Join(root, "sub", "c.go"), "x\n\nTODO(cy): deep\n", 0o644)
	fsPutFile(t, filepath.Join(root, "sub", "d.txt"), "TODO(dd): excluded by sub/*.txt\n", 0o644)
	fsPutFile(t, filepath.Join(root, "vendor", "v.go"), "TODO(v): excluded dir\n", 0o644)
	fsPutFile(t, filepath.Join(root, "build", "x.go"), "TODO(x): dir-only exclude\n", 0o644)
	fsPutFile(t, filepath.Join(root, "sub", "build"), "TODO(f): a file named build stays\n", 0o644)
	outside := t.TempDir()
	fsPutFile(t, filepath.Join(outside, "o.go"), "TODO(o): behind a link\n", 0o644)
	os.Symlink(outside, filepath.Join(root, "linkdir"))
	os.Symlink(filepath.Join(outside, "o.go"), filepath.Join(root, "link.go"))

	res := fsGrepCall(t, fsReq{"path": root, "pattern": `TODO\(.+\):`})
	want := "a.txt:2:TODO(bob): one\na.txt:3:TODO(bob): two\nb.go:2:// TODO(ann): fix\n" +
		"build/x.go:1:TODO(x): dir-only exclude\nsub/build:1:TODO(f): a file named build stays\n" +
		"sub/c.go:3:TODO(cy): deep\nsub/d.txt:1:TODO(dd): excluded by sub/*.txt\nvendor/v.go:1:TODO(v): excluded dir\n"
	if got := fsMatchList(res, root); got != want || res.Truncated {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}

	res = fsGrepCall(t, fsReq{"path": root, "pattern": `todo\(`, "ignoreCase": true, "recursive": true,
		"exclude": []string{"vendor", "sub/*.txt", "build/"}})
	want = "a.txt:2:TODO(bob): one\na.txt:3:TODO(bob): two\nb.go:2:// TODO(ann): fix\n" +
		"sub/build:1:TODO(f): a file named build stays\nsub/c.go:3:TODO(cy): deep\n"
	if got := fsMatchList(res, root); got != want {
		t.Fatalf("excludes: got\n%s\nwant\n%s", got, want)
	}

	res = fsGrepCall(t, fsReq{"path": root, "pattern": "TODO", "include": "*.go", "exclude": []string{"v?ndor"}})
	want = "b.go:2:// TODO(ann): fix\nbuild/x.go:1:TODO(x): dir-only exclude\nsub/c.go:3:TODO(cy): deep\n"
	if got := fsMatchList(res, root); got != want {
		t.Fatalf("include: got\n%s\nwant\n%s", got, want)
	}

	// A single file; a symlink named directly is refused.
	res = fsGrepCall(t, fsReq{"path": filepath.Join(root, "a.txt"), "pattern": "two$", "recursive": false})
	if len(res.Matches) != 1 || res.Matches[0].Line != 3 {
		t.Fatalf("single file %+v", res)
	}
	link := filepath.Join(root, "link.go")
	fsCall(t, fsHandler(Grep), fsReq{"path": link, "pattern": "x"}).failed(t, protocol.CodeFsWrongType, link)
}

func TestFsGrepRequestErrors(t *testing.T) {
	root := t.TempDir()
	fsPutFile(t, filepath.Join(root, "f"), "x", 0o644)
	fsCall(t, fsHandler(Grep), fsReq{"path": root, "pattern": "x", "recursive": false}).failed(t, protocol.CodeFsBadRequest, root)
	oe := fsCall(t, fsHandler(Grep), fsReq{"path": root, "pattern": "a(b"}).failed(t, protocol.CodeFsBadRegex, root)
	if !strings.Contains(oe.Message, "missing closing )") {
		t.Errorf("message %q", oe.Message)
	}
	fsCall(t, fsHandler(Grep), fsReq{"path": root, "pattern": `(?<=x)y`}).failed(t, protocol.CodeFsBadRegex, root) // no lookbehind in RE2
	fsCall(t, fsHandler(Grep), fsReq{"path": root, "pattern": ""}).failed(t, protocol.CodeFsBadRequest, root)
	fsCall(t, fsHandler(Grep), fsReq{"path": root, "pattern": "x", "include": []string{"[a-"}}).failed(t, protocol.CodeFsBadRequest, root)
	fsCall(t, fsHandler(Grep), fsReq{"path": root, "pattern": "x", "maxMatches": 0}).failed(t, protocol.CodeFsBadRequest, root)
	fsCall(t, fsHandler(Grep), fsReq{"path": root, "pattern": "x", "maxLineBytes": -1}).failed(t, protocol.CodeFsBadRequest, root)
	missing := filepath.Join(root, "missing")
	fsCall(t, fsHandler(Grep), fsReq{"path": missing, "pattern": "x"}).failed(t, protocol.CodeFsNotFound, missing)
}

// Seed rule: "Lines longer than max_line_bytes are truncated with …".
func TestFsGrepSkipsBinaryAndTruncates(t *testing.T) {
	root := t.TempDir()
	fsPutFile(t, filepath.Join(root, "bin"), "needle\x00 binary", 0o644)
	late := strings.Repeat("filler line\n", 1000) + "needle after 8 KiB\x00\n" // NUL beyond the sniff window
	fsPutFile(t, filepath.Join(root, "late"), late, 0o644)
	fsPutFile(t, filepath.Join(root, "long"), strings.Repeat("x", 10000)+"needle\nshort needle\n", 0o644)
	fsPutFile(t, filepath.Join(root, "utf8"), strings.Repeat("é", 100)+" needle\n", 0o644)

	res := fsGrepCall(t, fsReq{"path": root, "pattern": "needle", "maxLineBytes": 101})
	if len(res.Matches) != 4 {
		t.Fatalf("matches %+v", res.Matches)
	}
	if m := res.Matches[0]; !strings.HasSuffix(m.Path, "/late") || m.Line != 1001 {
		t.Errorf("late NUL: %+v", m)
	}
	if c := res.Matches[1].Content; c != strings.Repeat("x", 101)+"…" {
		t.Errorf("long line content %q", c)
	}
	if m := res.Matches[2]; m.Content != "short needle" || m.Line != 2 {
		t.Errorf("line after the long one %+v", m)
	}
	// 101 bytes would split an "é": the cut backs off to 100 bytes (50 runes).
	if c := res.Matches[3].Content; c != strings.Repeat("é", 50)+"…" {
		t.Errorf("utf8 cut %q", c)
	}
}

func TestFsGrepMaxMatches(t *testing.T) {
	root := t.TempDir()
	for i := 0; i < 5; i++ {
		fsPutFile(t, filepath.Join(root, fmt.Sprintf("f%d", i)), "hit\nmiss\nhit\nhit\n", 0o644)
	}
	res := fsGrepCall(t, fsReq{"path": root, "pattern": "hit", "maxMatches": 7})
	if len(res.Matches) != 7 || !res.Truncated {
		t.Fatalf("%d matches truncated=%v", len(res.Matches), res.Truncated)
	}
	if last := res.Matches[6]; !strings.HasSuffix(last.Path, "/f2") || last.Line != 1 {
		t.Fatalf("last match %+v", last)
	}
	res = fsGrepCall(t, fsReq{"path": root, "pattern": "hit", "maxMatches": 15}) // exactly all of them
	if len(res.Matches) != 15 || res.Truncated {
		t.Fatalf("%d matches truncated=%v", len(res.Matches), res.Truncated)
	}
}

// The RESPONSE must stay under the 4 MiB frame cap whatever maxMatches allows.
func TestFsGrepResponseBudget(t *testing.T) {
	root := t.TempDir()
	line := strings.Repeat("m", 4000) + "\n"
	fsPutFile(t, filepath.Join(root, "wide"), strings.Repeat(line, 2000), 0o644)
	s := fsCall(t, fsHandler(Grep), fsReq{"path": root, "pattern": "m"})
	var res fsGrepResult
	s.ok(t, &res)
	if !res.Truncated || len(s.result) > 4<<20 || len(res.Matches) < 500 {
		t.Fatalf("%d matches, %d bytes, truncated=%v", len(res.Matches), len(s.result), res.Truncated)
	}
}

func TestFsGrepVeryLongLines(t *testing.T) {
	root := t.TempDir()
	var b bytes.Buffer
	b.WriteString(strings.Repeat("a", 200<<10) + "needle-one\n") // longer than the read buffer
	b.WriteString(strings.Repeat("b", maxLineLen+10) + "needle-clipped\n")
	b.WriteString("needle-two")
	fsPutFile(t, filepath.Join(root, "f"), b.String(), 0o644)
	res := fsGrepCall(t, fsReq{"path": root, "pattern": "needle-[a-z]+", "maxLineBytes": 10})
	if len(res.Matches) != 2 || res.Matches[0].Line != 1 || res.Matches[1].Line != 3 ||
		res.Matches[1].Content != "needle-two" {
		t.Fatalf("%+v", res.Matches)
	}
}

func TestFsLineReader(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""}, {"a", "a$"}, {"a\n", "a|"}, {"a\n\nb", "a|,|,b$"}, {"x\r\ny\n", "x\r|,y|"},
	} {
		lr := newLineReader(strings.NewReader(tc.in))
		var got []string
		for {
			line, nl, _, err := lr.next()
			if err == io.EOF {
				break
			}
			end := "$"
			if nl {
				end = "|"
			}
			got = append(got, string(line)+end)
		}
		if strings.Join(got, ",") != tc.want {
			t.Errorf("%q → %q, want %q", tc.in, strings.Join(got, ","), tc.want)
		}
	}
}

// 10 000 files in 100 directories; prints the time (budget goals live in bench/).
func TestFsGrepTenThousandFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("short mode")
	}
	root := t.TempDir()
	body := strings.Repeat("lorem ipsum dolor sit amet, consectetur adipiscing elit\n", 30)
	for d := 0; d < 100; d++ {
		dir := filepath.Join(root, fmt.Sprintf("d%02d", d))
		os.Mkdir(dir, 0o755)
		for f := 0; f < 100; f++ {
			content := body
			if f%10 == 0 {
				content += fmt.Sprintf("func handler%d_%d() error\n", d, f)
			}
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d.go", f)), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	start := time.Now()
	res := fsGrepCall(t, fsReq{"path": root, "pattern": `func handler\d+_\d+\(\)`})
	regexTime := time.Since(start)
	start = time.Now()
	lit := fsGrepCall(t, fsReq{"path": root, "pattern": "handler", "include": "*.go"})
	literalTime := time.Since(start)
	if len(res.Matches) != 1000 || len(lit.Matches) != 1000 || res.Truncated {
		t.Fatalf("%d / %d matches", len(res.Matches), len(lit.Matches))
	}
	if res.Matches[0].Path != filepath.Join(root, "d00", "f00.go") || res.Matches[0].Line != 31 {
		t.Fatalf("first match %+v", res.Matches[0])
	}
	t.Logf("grep over 10000 files (300k lines): regex %v, literal %v", regexTime, literalTime)
	if regexTime > 30*time.Second {
		t.Fatalf("grep took %v", regexTime)
	}
}
