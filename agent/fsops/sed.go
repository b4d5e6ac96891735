package fsops

import (
	"bufio"
	"io"
	"regexp"
	"syscall"
	"time"

	"krunbox/agent/protocol"
)

// fsSed replaces pattern by replacement, line by line (a match never spans a newline),
// in the files given either as `files` or as `path` + recursive/include/exclude (the
// same selection as fs.grep). Exactly one form, else S210; a bad regex is S217; both
// are checked before any file is touched. regex:false takes pattern and replacement
// literally; with regex:true the replacement expands $1, ${1}, ${name} ($$ is a "$";
// "$1a" means the group named "1a": write "${1}a"). firstOnly replaces at most one match
// per line. A changed file is rewritten via temp + fsync + rename, keeping its mode
// (and owner when permitted). Binary files (NUL in the first 8 KiB) are left alone.
// Per-file failures become {success:false, error:"S21x: ..."}; the others go on.
// results lists every file of the `files` form, and for the `path` form only the files
// that were changed or failed.
func Sed(s protocol.Stream, r *protocol.FsSedRequest) {
	files, walk, bad := sedSelection(r)
	var ed *sedEdit
	if bad == nil {
		ed, bad = newSedEdit(r, firstOr(files, walk))
	}
	if bad != nil {
		s.Fail(bad)
		return
	}
	var results []protocol.SedResult
	var total int64
	record := func(res protocol.SedResult) {
		total += res.Replacements
		results = append(results, res)
	}
	ctx := s.Context()
	if walk != nil {
		isDir, oe := checkSearchRoot(walk.root, boolOr(r.Recursive, true))
		if oe != nil {
			s.Fail(oe)
			return
		}
		if !isDir {
			files = []string{walk.root}
		} else {
			walk.dirError = func(p string, err error) { record(failedResult(p, fsError(err, p))) }
			err := walk.visit(ctx, func(p string) error {
				if res := ed.file(p); res.Replacements > 0 || !res.Success {
					record(res)
				}
				return nil
			})
			if err != nil {
				s.Fail(fsError(err, walk.root))
				return
			}
		}
	}
	for _, p := range files {
		if err := ctx.Err(); err != nil {
			s.Fail(fsError(err, p))
			return
		}
		record(ed.file(p))
	}
	if results == nil {
		results = []protocol.SedResult{}
	}
	s.Respond(protocol.FsSedResponse{Results: results, TotalReplacements: total})
}

// sedSelection checks the exactly-one-form rule and the paths of either form.
func sedSelection(r *protocol.FsSedRequest) ([]string, *treeWalk, *protocol.OpError) {
	switch {
	case r.Files != nil && r.Path != nil:
		return nil, nil, badRequest("", "give either files or path, not both")
	case r.Files == nil && r.Path == nil:
		return nil, nil, badRequest("", "give either files or path")
	case r.Path != nil:
		root, bad := cleanPath("path", *r.Path)
		if bad != nil {
			return nil, nil, bad
		}
		w, bad := selection(root, nil, r.Include, r.Exclude)
		return nil, w, bad
	}
	if len(r.Files) == 0 {
		return nil, nil, badRequest("", "files must not be empty")
	}
	seen := make(map[string]bool, len(r.Files))
	files := make([]string, 0, len(r.Files))
	for _, f := range r.Files {
		p, bad := cleanPath("file", f)
		if bad != nil {
			return nil, nil, bad
		}
		if !seen[p] { // a file named twice must not be edited twice
			seen[p] = true
			files = append(files, p)
		}
	}
	return files, nil, nil
}

func firstOr(files []string, w *treeWalk) string {
	if w != nil {
		return w.root
	}
	return files[0]
}

// sedEdit is one compiled replacement.
type sedEdit struct {
	lr          *lineReader // reused for every file
	re          *regexp.Regexp
	replacement []byte
	literal     bool // insert replacement as is (regex:false)
	limit       int  // matches per line, -1 for all
}

func newSedEdit(r *protocol.FsSedRequest, where string) (*sedEdit, *protocol.OpError) {
	regex := boolOr(r.Regex, true)
	re, bad := compilePattern(where, r.Pattern, regex, r.IgnoreCase)
	if bad != nil {
		return nil, bad
	}
	ed := &sedEdit{re: re, replacement: []byte(r.Replacement), literal: !regex, limit: -1}
	if r.FirstOnly {
		ed.limit = 1
	}
	return ed, nil
}

// line appends the edited line to dst and returns it with the number of replacements.
func (ed *sedEdit) line(dst, line []byte) ([]byte, int) {
	locs := ed.re.FindAllSubmatchIndex(line, ed.limit)
	last := 0
	for _, loc := range locs {
		dst = append(dst, line[last:loc[0]]...)
		if ed.literal {
			dst = append(dst, ed.replacement...)
		} else {
			dst = ed.re.Expand(dst, ed.replacement, line, loc)
		}
		last = loc[1]
	}
	return append(dst, line[last:]...), len(locs)
}

func failedResult(p string, oe *protocol.OpError) protocol.SedResult {
	return protocol.SedResult{Path: p, Success: false, Error: oe.Code + ": " + oe.Message}
}

// file edits one file. Lines are streamed: nothing is written until the first line
// that changes, when a temp file is started with the unchanged bytes before it.
func (ed *sedEdit) file(p string) protocol.SedResult {
	fi, err := lstatBeneath(p)
	if err != nil {
		return failedResult(p, fsError(err, p))
	}
	if !fi.Mode().IsRegular() {
		return failedResult(p, notRegularError(p, fi))
	}
	f, fi, oe := openRegular(p)
	if oe != nil {
		return failedResult(p, oe)
	}
	defer f.Close()
	if ed.lr == nil {
		ed.lr = newLineReader(f)
	} else {
		ed.lr.reset(f)
	}
	lr := ed.lr
	if lr.looksBinary() {
		return protocol.SedResult{Path: p, Success: true}
	}
	var out *atomicFile
	var w *bufio.Writer
	var offset int64 // bytes of f consumed so far
	var buf []byte
	count := 0
	fail := func(oe *protocol.OpError) protocol.SedResult {
		if out != nil {
			out.abort()
		}
		return failedResult(p, oe)
	}
	for {
		line, newline, clipped, err := lr.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(fsError(err, p))
		}
		if clipped {
			return fail(fsErrorf(protocol.CodeFsIO, p, "has a line longer than %d bytes; not edited", maxLineLen))
		}
		lineLen := int64(len(line))
		if newline {
			lineLen++
		}
		var n int
		buf, n = ed.line(buf[:0], line)
		if n > 0 && out == nil {
			if out, err = createAtomic(p); err != nil {
				out = nil
				return fail(fsError(err, p))
			}
			w = bufio.NewWriterSize(out, 64<<10)
			if _, err := io.Copy(w, io.NewSectionReader(f, 0, offset)); err != nil {
				return fail(fsError(retarget(err, p), p))
			}
		}
		count += n
		offset += lineLen
		if out == nil {
			continue
		}
		if newline {
			buf = append(buf, '\n')
		}
		if _, err := w.Write(buf); err != nil {
			return fail(fsError(retarget(err, p), p))
		}
	}
	if out == nil {
		return protocol.SedResult{Path: p, Success: true}
	}
	if err := w.Flush(); err != nil {
		return fail(fsError(retarget(err, p), p))
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		out.Chown(int(st.Uid), int(st.Gid)) // best effort: without CAP_CHOWN only our own ids
	}
	if err := out.commit(permBits(fi), time.Time{}); err != nil {
		return failedResult(p, fsError(err, p))
	}
	return protocol.SedResult{Path: p, Replacements: int64(count), Success: true}
}
