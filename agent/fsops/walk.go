package fsops

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"krunbox/agent/protocol"
)

// File selection shared by fs.grep and fs.sed (path form).
//
// Globs (include/exclude) use path.Match: `*` is any run of characters except `/`, `?`
// one character except `/`, `[...]` a class, `\` escapes. Gitignore-like anchoring:
//   - a glob without `/` is matched against the entry's base name, at any depth;
//   - a glob with a `/` ("target/*", "/build") is matched against the path relative to
//     the walk root, a leading `/` being dropped;
//   - a trailing `/` ("target/") matches directories only.
// exclude applies to files and directories (an excluded directory is not entered);
// include applies to files only (a directory is always entered). The walk is sorted
// by name, never follows symlinks, and only regular files are visited.

type fsGlob struct {
	pattern  string
	anchored bool
	dirOnly  bool
}

func compileGlobs(root, field string, list []string) ([]fsGlob, *protocol.OpError) {
	out := make([]fsGlob, 0, len(list))
	for _, raw := range list {
		g := fsGlob{pattern: raw}
		if strings.HasSuffix(g.pattern, "/") {
			g.dirOnly = true
			g.pattern = strings.TrimRight(g.pattern, "/")
		}
		if strings.Contains(g.pattern, "/") {
			g.anchored = true
			g.pattern = strings.TrimLeft(g.pattern, "/")
		}
		if _, err := path.Match(g.pattern, ""); err != nil || g.pattern == "" {
			return nil, badRequest(root, "%s glob %q is not a valid pattern", field, raw)
		}
		out = append(out, g)
	}
	return out, nil
}

func (g fsGlob) matches(rel string, isDir bool) bool {
	if g.dirOnly && !isDir {
		return false
	}
	name := rel
	if !g.anchored {
		name = path.Base(rel)
	}
	ok, _ := path.Match(g.pattern, name)
	return ok
}

func anyGlob(globs []fsGlob, rel string, isDir bool) bool {
	for _, g := range globs {
		if g.matches(rel, isDir) {
			return true
		}
	}
	return false
}

// treeWalk visits the regular files below root that the globs select.
type treeWalk struct {
	root             string
	include, exclude []fsGlob
	// dirError is told about a directory that could not be read; the walk goes on.
	dirError func(p string, err error)
}

func (w *treeWalk) visit(ctx context.Context, file func(p string) error) error {
	return WalkBeneath(w.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == w.root {
				return err
			}
			if w.dirError != nil {
				w.dirError(p, err)
			}
			return nil // WalkDir skips the unreadable directory
		}
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if p == w.root {
			return nil
		}
		rel := strings.TrimPrefix(p[len(w.root):], "/")
		if d.IsDir() {
			if anyGlob(w.exclude, rel, true) {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || anyGlob(w.exclude, rel, false) {
			return nil
		}
		if len(w.include) > 0 && !anyGlob(w.include, rel, false) {
			return nil
		}
		return file(p)
	})
}

// openRegular opens a file for reading without following a symlink and without
// blocking on a FIFO, and checks it is a regular file.
func openRegular(p string) (*os.File, os.FileInfo, *protocol.OpError) {
	f, err := openFileBeneath(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, nil, fsErrorf(protocol.CodeFsWrongType, p, "is a symlink (symlinks are not followed)")
	}
	if err != nil {
		return nil, nil, fsError(err, p)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fsError(err, p)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, notRegularError(p, fi)
	}
	return f, fi, nil
}
