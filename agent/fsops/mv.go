package fsops

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"krunbox/agent/protocol"
)

// fsMv renames src to dst; a symlink is moved as the link itself. overwrite:false and an
// existing dst → S213. Across filesystems (EXDEV) src is copied to a temp name in dst's
// directory, fsynced, renamed onto dst, and only then removed: src survives any failure.
// overwrite:true replaces a file or an empty directory (rename(2) semantics: a non-empty
// directory is S214, file vs directory S212). overwrite:false is checked just before
// rename(2) on the same filesystem (a racing creator of dst could still lose), and
// atomically with link(2) for a non-directory moved across filesystems.
func Mv(s protocol.Stream, r *protocol.FsMvRequest) {
	src, bad := cleanPath("src", r.Src)
	if bad == nil {
		r.Dst, bad = cleanPath("dst", r.Dst)
	}
	if bad == nil && (src == "/" || r.Dst == "/") {
		bad = badRequest("/", "cannot move the root directory or onto it")
	}
	if bad != nil {
		s.Fail(bad)
		return
	}
	if oe := moveEntry(src, r.Dst, r.Overwrite); oe != nil {
		s.Fail(oe)
		return
	}
	s.Respond(map[string]any{})
}

func moveEntry(src, dst string, overwrite bool) *protocol.OpError {
	fi, oe := lstatOrError(src)
	if oe != nil {
		return oe
	}
	if !overwrite {
		if oe := mustNotExist(dst); oe != nil {
			return oe
		}
	}
	err := rename(src, dst)
	if errors.Is(err, syscall.EXDEV) {
		err = moveAcrossDevices(src, dst, fi, overwrite)
	}
	if err != nil {
		return renameError(err, src, dst)
	}
	return nil
}

// mustNotExist is the S213 check of overwrite:false.
func mustNotExist(p string) *protocol.OpError {
	_, err := lstatBeneath(p)
	if err == nil {
		return fsErrorf(protocol.CodeFsExists, p, "already exists (overwrite is false)")
	}
	if !isNotExist(err) {
		return fsError(err, p)
	}
	return nil
}

// madeOrErrno passes on an OpError already made and makes one for path from an error without an
// errno; otherwise it returns the errno, for the caller to word.
func madeOrErrno(err error, path string) (*protocol.OpError, syscall.Errno) {
	var oe *protocol.OpError
	if errors.As(err, &oe) {
		return oe, 0
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return fsError(err, path), 0
	}
	return nil, errno
}

// renameError names the side of a move that an errno is about.
func renameError(err error, src, dst string) *protocol.OpError {
	done, errno := madeOrErrno(err, src)
	if done != nil {
		return done
	}
	p := src
	switch errno {
	case syscall.ENOENT, syscall.ENOTDIR, syscall.EISDIR, syscall.ENOTEMPTY, syscall.EEXIST:
		p = dst // src was just seen; these are about dst or its parent
	}
	out := fsError(errno, p)
	out.Message = fmt.Sprintf("move %s to %s: %s", src, dst, errno.Error())
	return out
}

// moveAcrossDevices copies src to a temp name beside dst, renames it onto dst (link(2)
// when dst must not exist, so a racing creator is not clobbered), then removes src.
func moveAcrossDevices(src, dst string, fi os.FileInfo, overwrite bool) error {
	tmp := tempPathFor(dst)
	if err := copyEntry(src, tmp, fi); err != nil {
		removeAllBeneath(tmp)
		return err
	}
	var err error
	if overwrite || fi.IsDir() {
		// Directories cannot be hard-linked; rename(2) refuses a non-empty dst anyway.
		err = rename(tmp, dst)
	} else if err = linkBeneath(tmp, dst); err == nil {
		unlinkBeneath(tmp)
	}
	if err != nil {
		removeAllBeneath(tmp)
		return err
	}
	syncDir(filepath.Dir(dst))
	if err := removeAllBeneath(src); err != nil {
		oe := fsError(err, src)
		oe.Message = fmt.Sprintf("%s was copied to %s but the source could not be removed: %s", src, dst, oe.Message)
		return oe
	}
	return nil
}

// copyEntry copies one entry (a directory recursively) without following symlinks,
// keeping mode, mtime and, when allowed, ownership. Files are fsynced.
func copyEntry(src, dst string, fi os.FileInfo) error {
	mode := permBits(fi)
	var err error
	switch typ := fi.Mode().Type(); {
	case typ == 0:
		err = copyFileData(src, dst, mode)
	case typ == fs.ModeDir:
		err = copyDir(src, dst, mode)
	case typ == fs.ModeSymlink:
		var target string
		if target, err = readlinkBeneath(src); err == nil {
			err = symlinkBeneath(target, dst)
		}
	case typ == fs.ModeNamedPipe:
		if err = mknodBeneath(dst, syscall.S_IFIFO|mode, 0); err == nil {
			err = chmodBeneath(dst, mode)
		}
	default:
		return fsErrorf(protocol.CodeFsWrongType, src, "cannot copy this file type across filesystems")
	}
	if err != nil {
		return copyFailed(src, err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		lchownBeneath(dst, int(st.Uid), int(st.Gid)) // best effort, like mv(1)
	}
	if fi.Mode()&fs.ModeSymlink == 0 {
		chmodBeneath(dst, mode) // again: chown clears setuid/setgid
		chtimesBeneath(dst, fi.ModTime(), fi.ModTime())
	}
	return nil
}

// copyFailed names the source entry whose copy failed (the temp name means nothing
// to the caller); an error from a nested entry keeps that entry's name.
func copyFailed(src string, err error) error {
	done, errno := madeOrErrno(err, src)
	if done != nil {
		return done
	}
	out := fsError(errno, src)
	out.Message = "copy " + src + " across filesystems: " + errno.Error()
	return out
}

func copyDir(src, dst string, mode uint32) error {
	if err := mkdirBeneath(dst, 0o700); err != nil {
		return err
	}
	list, err := readDirBeneath(src)
	if err != nil {
		return err
	}
	for _, de := range list {
		info, err := de.Info()
		if err != nil {
			return err
		}
		if err := copyEntry(filepath.Join(src, de.Name()), filepath.Join(dst, de.Name()), info); err != nil {
			return err
		}
	}
	// The final mode goes last: a read-only directory must still be filled first.
	return chmodBeneath(dst, mode)
}

func copyFileData(src, dst string, mode uint32) error {
	in, err := openFileBeneath(src, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := openFileBeneath(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = syscall.Fchmod(int(out.Fd()), mode)
	}
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}
