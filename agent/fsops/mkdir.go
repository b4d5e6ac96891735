package fsops

import (
	"errors"
	"io/fs"
	"path/filepath"

	"krunbox/agent/protocol"
)

// fsMkdir creates a directory with exactly the given mode (default 0755, umask ignored).
// parents:false: missing parent → S211, existing path → S213.
// parents:true: missing ancestors are created 0755; an existing directory is a no-op
// ({created:false}); an existing non-directory (a symlink included) → S213, since the
// name is taken (the same code as parents:false).
func Mkdir(s protocol.Stream, r *protocol.FsMkdirRequest) {
	if !requestPath(s, &r.Path) {
		return
	}
	p := r.Path
	created, oe := makeDir(p, r.Mode.Or(0o755), r.Parents)
	if oe != nil {
		s.Fail(oe)
		return
	}
	s.Respond(protocol.FsMkdirResponse{Created: created})
}

func makeDir(p string, mode uint32, parents bool) (bool, *protocol.OpError) {
	if parents {
		if err := mkdirAllBeneath(filepath.Dir(p), 0o755); err != nil {
			return false, fsError(err, p)
		}
	}
	err := mkdirBeneath(p, mode)
	if errors.Is(err, fs.ErrExist) {
		fi, lerr := lstatBeneath(p)
		if parents && lerr == nil && fi.IsDir() {
			return false, nil
		}
		if lerr == nil && !fi.IsDir() {
			return false, fsErrorf(protocol.CodeFsExists, p, "exists and is not a directory")
		}
		return false, fsErrorf(protocol.CodeFsExists, p, "already exists")
	}
	if err != nil {
		return false, fsError(err, p)
	}
	// mkdir(2) applies the umask; the caller asked for this exact mode.
	if err := chmodBeneath(p, mode); err != nil {
		return true, fsError(err, p)
	}
	return true, nil
}
