package fsops

import (
	"errors"
	"io/fs"
	"syscall"

	"krunbox/agent/protocol"
)

// ownerChange is the chown part of a chmod request; -1 leaves an id unchanged.
type ownerChange struct{ uid, gid int }

// fsChmod changes mode and/or owner of path (and, recursive, of the whole tree; the walk
// does not follow symlinks). Symlinks: Linux has no mode for a link, so a mode-only
// request skips them; a uid/gid change applies to the link itself (lchown).
// updated counts entries the call applied to (root included), whether or not the
// values differed. The first failing entry stops the walk and names itself in the error.
func Chmod(s protocol.Stream, r *protocol.FsChmodRequest) {
	if !requestPath(s, &r.Path) {
		return
	}
	p := r.Path
	owner, bad := ownerOf(p, r.UID, r.GID)
	if bad != nil {
		s.Fail(bad)
		return
	}
	if !r.Mode.Set && owner == nil {
		s.Fail(badRequest(p, "chmod needs at least one of mode, uid, gid"))
		return
	}
	root, oe := lstatOrError(p)
	if oe != nil {
		s.Fail(oe)
		return
	}
	updated := 0
	apply := func(entry string, d fs.DirEntry, walkErr error) error {
		if walkErr != nil {
			return walkErr
		}
		if err := s.Context().Err(); err != nil {
			return err
		}
		applied, err := chmodEntry(entry, d.Type(), r.Mode, owner)
		if applied {
			updated++
		}
		return err
	}
	var err error
	if r.Recursive {
		err = WalkBeneath(p, apply)
	} else {
		err = apply(p, fs.FileInfoToDirEntry(root), nil)
	}
	if err != nil {
		s.Fail(fsError(err, p))
		return
	}
	s.Respond(protocol.FsChmodResponse{Updated: int64(updated)})
}

// ownerOf validates uid/gid (each absent, null, or 0..2^32-2).
func ownerOf(p string, uid, gid *int64) (*ownerChange, *protocol.OpError) {
	if uid == nil && gid == nil {
		return nil, nil
	}
	o := &ownerChange{uid: -1, gid: -1}
	for _, f := range []struct {
		name string
		v    *int64
		dst  *int
	}{{"uid", uid, &o.uid}, {"gid", gid, &o.gid}} {
		if f.v == nil {
			continue
		}
		if *f.v < 0 || *f.v > 0xFFFFFFFE {
			return nil, badRequest(p, "%s %d is out of range", f.name, *f.v)
		}
		*f.dst = int(*f.v)
	}
	return o, nil
}

// chmodEntry applies owner then mode (chown clears setuid/setgid, so the mode goes last).
func chmodEntry(p string, typ fs.FileMode, mode fileMode, owner *ownerChange) (bool, error) {
	isLink := typ&fs.ModeSymlink != 0
	applied := false
	if owner != nil {
		if err := lchownBeneath(p, owner.uid, owner.gid); err != nil {
			// EINVAL: the id has no mapping in this sandbox's user namespace, so giving the
			// file to it is not something the workload user may do.
			if errors.Is(err, syscall.EINVAL) {
				return false, fsErrorf(protocol.CodeFsDenied, p, "cannot change owner to uid %d gid %d: no such user in this sandbox", owner.uid, owner.gid)
			}
			return false, err
		}
		applied = true
	}
	if mode.Set && !isLink {
		if err := chmodBeneath(p, mode.Value); err != nil {
			return applied, err
		}
		applied = true
	}
	return applied, nil
}
