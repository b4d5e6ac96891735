package fsops

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"unicode/utf8"

	"krunbox/agent/protocol"
)

// truncatedMarker ends a match line cut at maxLineBytes: a single "…", as the reference
// grep API marks it, so a caller can tell a cut line by its last rune.
const truncatedMarker = "…"

// fsGrep searches a file, or a directory tree (recursive, the default; recursive:false
// on a directory is S210), line by line with an RE2 pattern. Binary files are skipped,
// and so are unreadable files and directories. The walk is sorted; a file given as path
// is searched whatever the globs say. truncated:true means more matches exist than were
// returned (maxMatches reached, or the response budget of responseBudget bytes).
func Grep(s protocol.Stream, r *protocol.FsGrepRequest) {
	if !requestPath(s, &r.Path) {
		return
	}
	root := r.Path
	var bad *protocol.OpError
	g := &grepper{ctx: s.Context(), maxMatches: 10000, maxLineBytes: 4096}
	if r.MaxMatches != nil {
		g.maxMatches = *r.MaxMatches
	}
	if r.MaxLineBytes != nil {
		g.maxLineBytes = *r.MaxLineBytes
	}
	switch {
	case g.maxMatches < 1:
		bad = badRequest(root, "maxMatches must be at least 1, got %d", g.maxMatches)
	case g.maxLineBytes < 1:
		bad = badRequest(root, "maxLineBytes must be at least 1, got %d", g.maxLineBytes)
	}
	walk, bad := selection(root, bad, r.Include, r.Exclude)
	if bad == nil {
		g.re, bad = compilePattern(root, r.Pattern, true, r.IgnoreCase)
	}
	if bad != nil {
		s.Fail(bad)
		return
	}
	g.literal, g.complete = g.re.LiteralPrefix()
	isDir, oe := checkSearchRoot(root, boolOr(r.Recursive, true))
	if oe != nil {
		s.Fail(oe)
		return
	}
	var err error
	if isDir {
		err = walk.visit(s.Context(), g.file)
	} else {
		err = g.file(root)
	}
	if err != nil && !errors.Is(err, errGrepDone) {
		s.Fail(fsError(err, root))
		return
	}
	if g.matches == nil {
		g.matches = []protocol.GrepMatch{}
	}
	s.Respond(protocol.FsGrepResponse{Matches: g.matches, Truncated: g.truncated})
}

// selection validates the include/exclude globs into a treeWalk of root.
func selection(root string, bad *protocol.OpError, include, exclude []string) (*treeWalk, *protocol.OpError) {
	w := &treeWalk{root: root}
	if bad == nil {
		w.include, bad = compileGlobs(root, "include", include)
	}
	if bad == nil {
		w.exclude, bad = compileGlobs(root, "exclude", exclude)
	}
	return w, bad
}

// compilePattern builds the RE2 regexp for grep/sed: an empty pattern is S210, a
// pattern that does not compile S217; regex:false quotes it as a literal.
func compilePattern(root, pattern string, regex, ignoreCase bool) (*regexp.Regexp, *protocol.OpError) {
	if pattern == "" {
		return nil, badRequest(root, "pattern must not be empty")
	}
	expr := pattern
	if !regex {
		expr = regexp.QuoteMeta(pattern)
	}
	if ignoreCase {
		expr = "(?i)" + expr
	}
	re, err := regexp.Compile(expr)
	if err != nil {
		return nil, fsErrorf(protocol.CodeFsBadRegex, root, "invalid pattern: %v", err)
	}
	return re, nil
}

// checkSearchRoot says whether root is a directory to walk (S210 when recursive is
// false) or a regular file; anything else is S212.
func checkSearchRoot(root string, recursive bool) (bool, *protocol.OpError) {
	fi, oe := lstatOrError(root)
	if oe != nil {
		return false, oe
	}
	if fi.IsDir() {
		if !recursive {
			return false, badRequest(root, "is a directory and recursive is false")
		}
		return true, nil
	}
	if !fi.Mode().IsRegular() {
		return false, notRegularError(root, fi)
	}
	return false, nil
}

var errGrepDone = errors.New("grep: enough matches")

type grepper struct {
	ctx          context.Context
	lr           *lineReader // reused for every file
	re           *regexp.Regexp
	literal      string // literal prefix every match starts with
	complete     bool   // the pattern is just that literal
	maxMatches   int
	maxLineBytes int
	matches      []protocol.GrepMatch
	size         int // JSON bytes of matches, against responseBudget
	truncated    bool
}

func (g *grepper) lineMatches(line []byte) bool {
	if g.literal != "" {
		if !bytes.Contains(line, []byte(g.literal)) {
			return false
		}
		if g.complete {
			return true
		}
	}
	return g.re.Match(line)
}

// file searches one file; errGrepDone stops the walk. Unreadable files are skipped.
func (g *grepper) file(p string) error {
	f, _, oe := openRegular(p)
	if oe != nil {
		return nil
	}
	defer f.Close()
	if g.lr == nil {
		g.lr = newLineReader(f)
	} else {
		g.lr.reset(f)
	}
	lr := g.lr
	if lr.looksBinary() {
		return nil
	}
	for n := 1; ; n++ {
		line, _, _, err := lr.next()
		if err != nil {
			return nil // io.EOF, or a read error: keep what was found, go on
		}
		if n%4096 == 0 && g.ctx.Err() != nil {
			return g.ctx.Err()
		}
		if !g.lineMatches(line) {
			continue
		}
		if len(g.matches) == g.maxMatches {
			g.truncated = true
			return errGrepDone
		}
		m := protocol.GrepMatch{Path: p, Line: int64(n), Content: clipLine(line, g.maxLineBytes)}
		b, _ := json.Marshal(m)
		if g.size += len(b) + 1; g.size > responseBudget {
			g.truncated = true
			return errGrepDone
		}
		g.matches = append(g.matches, m)
	}
}

// clipLine cuts a line to max bytes (on a UTF-8 boundary when possible) + the marker.
func clipLine(line []byte, max int) string {
	if len(line) <= max {
		return string(line)
	}
	cut := max
	for back := 0; back < utf8.UTFMax && cut > 0 && !utf8.RuneStart(line[cut]); back++ {
		cut--
	}
	if cut == 0 {
		cut = max
	}
	return string(line[:cut]) + truncatedMarker
}
