package fsops

import (
	"krunbox/agent/protocol"
)

// fsRm removes a file, a symlink (never its target) or a directory.
// A non-empty directory needs recursive:true (else S214, nothing removed).
// The recursive removal walks without following symlinks (os.RemoveAll uses
// openat/unlinkat with O_NOFOLLOW).
func Rm(s protocol.Stream, r *protocol.FsRmRequest) {
	if !requestPath(s, &r.Path) {
		return
	}
	p := r.Path
	if p == "/" {
		s.Fail(badRequest(p, "refusing to remove the root directory"))
		return
	}
	fi, oe := lstatOrError(p)
	if oe != nil {
		s.Fail(oe)
		return
	}
	var err error
	switch {
	case !fi.IsDir():
		err = unlinkBeneath(p)
	case r.Recursive:
		err = removeAllBeneath(p)
	default:
		err = rmdirBeneath(p)
	}
	if err != nil {
		s.Fail(fsError(err, p))
		return
	}
	s.Respond(map[string]any{})
}
