package fsops

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"

	"krunbox/agent/protocol"
)

// responseBudget bounds the JSON of one RESPONSE well below the 4 MiB frame cap.

const responseBudget = 3 << 20

// entryOf describes one filesystem entry, as lstat sees it (links are not
// followed): mode holds the permission bits (07777), mtime is unix milliseconds.
func entryOf(name string, fi os.FileInfo) protocol.FsEntry {
	return protocol.FsEntry{
		Name:      name,
		IsDir:     fi.IsDir(),
		IsSymlink: fi.Mode()&os.ModeSymlink != 0,
		Size:      fi.Size(),
		Mode:      int64(permBits(fi)),
		Mtime:     fi.ModTime().UnixMilli(),
	}
}

// permBits returns the raw st_mode & 07777 (os.FileMode keeps setuid etc. elsewhere).
func permBits(fi os.FileInfo) uint32 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Mode & 0o7777
	}
	return uint32(fi.Mode().Perm())
}

// fsLs lists a directory (not recursive), sorted by name. A directory too big for one
// RESPONSE is cut at the budget and flagged "truncated": true.
func Ls(s protocol.Stream, r *protocol.FsLsRequest) {
	dir, fi, ok := lstatRequested(s, r.Path)
	if !ok {
		return
	}
	if !fi.IsDir() {
		s.Fail(notDirError(dir, fi))
		return
	}
	list, err := readDirBeneath(dir)
	if err != nil {
		s.Fail(fsError(err, dir))
		return
	}
	entries := make([]protocol.FsEntry, 0, len(list))
	size, truncated := 0, false
	for _, de := range list {
		info, err := de.Info()
		if err != nil {
			continue // removed since the directory was read
		}
		e := entryOf(de.Name(), info)
		b, _ := json.Marshal(e)
		if size += len(b) + 1; size > responseBudget {
			truncated = true
			break
		}
		entries = append(entries, e)
	}
	s.Respond(protocol.FsLsResponse{Entries: entries, Truncated: truncated})
}

// fsStat describes one path without following a final symlink.
func Stat(s protocol.Stream, r *protocol.FsStatRequest) {
	p, fi, ok := lstatRequested(s, r.Path)
	if !ok {
		return
	}
	s.Respond(protocol.FsStatResponse(entryOf(filepath.Base(p), fi)))
}

// notDirError is the S212 for an op that needs a directory.
func notDirError(p string, fi os.FileInfo) *protocol.OpError {
	if fi.Mode()&os.ModeSymlink != 0 {
		return fsErrorf(protocol.CodeFsWrongType, p, "is a symlink, not a directory (symlinks are not followed)")
	}
	return fsErrorf(protocol.CodeFsWrongType, p, "not a directory")
}

// notRegularError is the S212 for an op that needs a regular file.
func notRegularError(p string, fi os.FileInfo) *protocol.OpError {
	switch {
	case fi.IsDir():
		return fsErrorf(protocol.CodeFsWrongType, p, "is a directory")
	case fi.Mode()&os.ModeSymlink != 0:
		return fsErrorf(protocol.CodeFsWrongType, p, "is a symlink (symlinks are not followed)")
	default:
		return fsErrorf(protocol.CodeFsWrongType, p, "not a regular file")
	}
}
