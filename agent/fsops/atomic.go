package fsops

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"
)

// Files are replaced atomically: written to a temp file in the target's directory,
// fsynced, given their mode, then renamed over the target, and the directory fsynced.
// A reader sees the old or the new content, never a mix; a failure leaves the old file.

const TempMarker = ".krunbox-tmp-"

var tempSeq uint64

// tempPathFor returns a fresh temp name beside target: .<base>.krunbox-tmp-<unique>.
// Uniqueness comes from time+pid+counter; O_EXCL at creation catches the rest.
func tempPathFor(target string) string {
	base := filepath.Base(target)
	if len(base) > 128 { // keep the temp name below NAME_MAX for long targets
		base = base[:128]
	}
	n := atomic.AddUint64(&tempSeq, 1)
	suffix := fmt.Sprintf("%x%x%x", time.Now().UnixNano(), os.Getpid(), n)
	return filepath.Join(filepath.Dir(target), "."+base+TempMarker+suffix)
}

// atomicFile is an open temp file that will replace target on commit.
type atomicFile struct {
	*os.File
	tmp    string
	target string
}

// createAtomic opens a new temp file beside target (mode 0600 until commit).
// Errors name target, not the temp file, since the caller knows only target.
func createAtomic(target string) (*atomicFile, error) {
	for attempt := 0; ; attempt++ {
		tmp := tempPathFor(target)
		f, err := openFileBeneath(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			return &atomicFile{File: f, tmp: tmp, target: target}, nil
		}
		if !errors.Is(err, fs.ErrExist) || attempt == 5 {
			return nil, retarget(err, target)
		}
	}
}

// commit sets mode (and mtime when non-zero), fsyncs and renames over the target.
func (a *atomicFile) commit(mode uint32, mtime time.Time) error {
	return a.finish(mode, mtime, true)
}

// commitNoSync is commit without the fsyncs, for callers that sync once for many files.
func (a *atomicFile) commitNoSync(mode uint32, mtime time.Time) error {
	return a.finish(mode, mtime, false)
}

func (a *atomicFile) finish(mode uint32, mtime time.Time, durable bool) error {
	err := syscall.Fchmod(int(a.Fd()), mode)
	if err == nil && !mtime.IsZero() {
		err = chtimesBeneath(a.tmp, mtime, mtime)
	}
	if err == nil && durable {
		err = a.Sync()
	}
	if cerr := a.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = rename(a.tmp, a.target)
	}
	if err != nil {
		unlinkBeneath(a.tmp)
		return retarget(err, a.target)
	}
	if durable {
		syncDir(filepath.Dir(a.target))
	}
	return nil
}

// rename is plain rename(2). (os.Rename refuses any existing directory as target with
// EEXIST; the kernel replaces an empty one and says ENOTEMPTY, EISDIR or ENOTDIR otherwise.)
// A non-empty target directory is always reported as ENOTEMPTY: POSIX lets the kernel
// say EEXIST instead, and some filesystems do.
func rename(src, dst string) error {
	err := bareErrno(renameBeneath(src, dst))
	if err == syscall.EEXIST {
		err = syscall.ENOTEMPTY
	}
	if err != nil {
		return &os.LinkError{Op: "rename", Old: src, New: dst, Err: err}
	}
	return nil
}

// abort drops the temp file; the target is untouched.
func (a *atomicFile) abort() {
	a.Close()
	unlinkBeneath(a.tmp)
}

// syncDir makes a rename in dir durable. Errors are ignored: the rename already happened
// and some filesystems refuse fsync on directories.
func syncDir(dir string) {
	d, err := openFileBeneath(dir, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return
	}
	d.Sync()
	d.Close()
}

// retarget rewrites the path inside a *PathError/*LinkError so that errors about temp
// files name the file the caller asked for.
func retarget(err error, path string) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return &fs.PathError{Op: "write", Path: path, Err: errno}
	}
	return err
}
