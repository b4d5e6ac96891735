package fsops

// Every path of an fs op is resolved beneath the sandbox's root and never
// through a symlink (PROTOCOL.md: symlinks are never followed): openat2 with
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS from an fd on "/",
// or, where the kernel lacks openat2, a walk that opens one component at a
// time with O_NOFOLLOW. The final operation then runs relative to the parent
// directory's fd (mkdirat, unlinkat, renameat, fstatat ...), so a workload
// that swaps a directory for a symlink meanwhile changes nothing: the agent
// never passes a /proc magic link (/proc/1/fd/N reaches the host-shared
// control dir) nor an ordinary symlink. A symlink anywhere in the path is
// ELOOP, reported as S212.
//
// The functions mirror package os; their errors are *fs.PathError naming the
// path the caller gave.

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

const (
	sysOpenat2          = 437 // the same on amd64 and arm64
	resolveNoMagiclinks = 0x02
	resolveNoSymlinks   = 0x04
	resolveBeneath      = 0x08
	atRemoveDir         = 0x200
	atSymlinkNofollow   = 0x100
	oPath               = 0x200000 // O_PATH, the same on amd64 and arm64
)

type openHow struct{ flags, mode, resolve uint64 }

var (
	rootOnce sync.Once
	rootFd   = -1
	rootErr  error
	// noOpenat2 is set once the kernel answered ENOSYS (Linux < 5.6).
	noOpenat2 atomic.Bool
)

// fsRootFd is an O_PATH fd on the agent's "/" (the sandbox root once pivoted).
func fsRootFd() (int, error) {
	rootOnce.Do(func() {
		rootFd, rootErr = syscall.Open("/", oPath|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		rootNow.Store(int64(rootFd))
	})
	return int(rootNow.Load()), rootErr
}

// rootNow is the fd fsRootFd hands out, replaced by ReopenRoot.
var rootNow atomic.Int64

// ReopenRoot takes up the agent's "/" again after the host pivoted the sandbox
// into a new root (a pooled sandbox's reset): the old fd kept the old root's
// layers alive and led every fs operation there. Only the host's own
// connection exists while it runs (sandbox.reset), so no operation is using
// the old fd.
func ReopenRoot() error {
	_, _ = fsRootFd()
	fd, err := syscall.Open("/", oPath|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if old := int(rootNow.Swap(int64(fd))); old >= 0 {
		_ = syscall.Close(old)
	}
	return nil
}

// openBeneath opens the absolute, clean path p. A final symlink is ELOOP,
// except with O_PATH|O_NOFOLLOW, which opens the link itself.
func openBeneath(p string, flags int, mode uint32) (int, error) {
	root, err := fsRootFd()
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: "/", Err: err}
	}
	rel := strings.Trim(p, "/")
	if rel == "" {
		rel = "."
	}
	flags |= syscall.O_CLOEXEC
	if !noOpenat2.Load() {
		fd, err := openat2(root, rel, flags, mode)
		if err != syscall.ENOSYS {
			if err != nil {
				return -1, &fs.PathError{Op: "open", Path: p, Err: err}
			}
			return fd, nil
		}
		noOpenat2.Store(true)
	}
	fd, err := openByComponents(root, rel, flags, mode)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: p, Err: err}
	}
	return fd, nil
}

func openat2(dirfd int, rel string, flags int, mode uint32) (int, error) {
	name, err := syscall.BytePtrFromString(rel)
	if err != nil {
		return -1, err
	}
	how := openHow{flags: uint64(flags), resolve: resolveBeneath | resolveNoSymlinks | resolveNoMagiclinks}
	if flags&syscall.O_CREAT != 0 {
		how.mode = uint64(mode)
	}
	for {
		fd, _, e := syscall.Syscall6(sysOpenat2, uintptr(dirfd), uintptr(unsafe.Pointer(name)), uintptr(unsafe.Pointer(&how)), unsafe.Sizeof(how), 0, 0)
		switch e {
		case 0:
			return int(fd), nil
		case syscall.EINTR, syscall.EAGAIN: // EAGAIN: a rename raced the lookup
			continue
		}
		return -1, e
	}
}

// openByComponents is the fallback: each directory on the way is opened with
// O_NOFOLLOW relative to the previous one (a symlink there gives ENOTDIR or
// ELOOP), and so is the last component. rel has no ".." (cleanPath refuses it).
func openByComponents(root int, rel string, flags int, mode uint32) (int, error) {
	parts := strings.Split(rel, "/")
	dir := root
	defer func() {
		if dir != root {
			syscall.Close(dir)
		}
	}()
	for _, part := range parts[:len(parts)-1] {
		next, err := syscall.Openat(dir, part, oPath|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		if dir != root {
			syscall.Close(dir)
		}
		dir = next
	}
	for {
		fd, err := syscall.Openat(dir, parts[len(parts)-1], flags|syscall.O_NOFOLLOW, mode)
		if err != syscall.EINTR {
			return fd, err
		}
	}
}

// parentOf opens the directory that holds p; the caller closes it. p is "/"
// or a clean absolute path; the parent of "/" is refused as EINVAL.
func parentOf(p string) (int, string, error) {
	if p == "/" {
		return -1, "", &fs.PathError{Op: "open", Path: p, Err: syscall.EINVAL}
	}
	dir, base := filepath.Split(p)
	fd, err := openBeneath(dir, oPath|syscall.O_DIRECTORY, 0)
	if err != nil {
		return -1, "", &fs.PathError{Op: "open", Path: p, Err: bareErrno(err)}
	}
	return fd, base, nil
}

func bareErrno(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// atParent runs op on p's parent fd and base name; its errno names p.
func atParent(opName, p string, op func(dirfd int, base string) error) error {
	dirfd, base, err := parentOf(p)
	if err != nil {
		return err
	}
	defer syscall.Close(dirfd)
	if err := op(dirfd, base); err != nil {
		return &fs.PathError{Op: opName, Path: p, Err: bareErrno(err)}
	}
	return nil
}

func sysAt(trap uintptr, a ...uintptr) error {
	var args [6]uintptr
	copy(args[:], a)
	for {
		_, _, e := syscall.Syscall6(trap, args[0], args[1], args[2], args[3], args[4], args[5])
		if e != syscall.EINTR {
			if e != 0 {
				return e
			}
			return nil
		}
	}
}

func ptr(s string) (uintptr, error) {
	b, err := syscall.BytePtrFromString(s)
	return uintptr(unsafe.Pointer(b)), err
}

// lstatBeneath is os.Lstat.
func lstatBeneath(p string) (os.FileInfo, error) {
	var st syscall.Stat_t
	if p == "/" {
		root, err := fsRootFd()
		if err == nil {
			err = syscall.Fstat(root, &st)
		}
		if err != nil {
			return nil, &fs.PathError{Op: "lstat", Path: p, Err: err}
		}
		return &statInfo{name: "/", st: st}, nil
	}
	err := atParent("lstat", p, func(dirfd int, base string) error {
		name, err := ptr(base)
		if err != nil {
			return err
		}
		return sysAt(sysFstatat, uintptr(dirfd), name, uintptr(unsafe.Pointer(&st)), atSymlinkNofollow)
	})
	if err != nil {
		return nil, err
	}
	return &statInfo{name: filepath.Base(p), st: st}, nil
}

// openFileBeneath is os.OpenFile; a symlink anywhere, the last component
// included, is ELOOP.
func openFileBeneath(p string, flags int, mode uint32) (*os.File, error) {
	fd, err := openBeneath(p, flags, mode)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), p), nil
}

// readDirBeneath is os.ReadDir (sorted by name) with each entry's lstat done
// relative to the directory's fd; entries removed meanwhile are left out.
func readDirBeneath(p string) ([]fs.DirEntry, error) {
	fd, err := openBeneath(p, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: p, Err: bareErrno(err)}
	}
	sort.Strings(names)
	out := make([]fs.DirEntry, 0, len(names))
	for _, n := range names {
		var st syscall.Stat_t
		name, err := ptr(n)
		if err == nil {
			err = sysAt(sysFstatat, uintptr(fd), name, uintptr(unsafe.Pointer(&st)), atSymlinkNofollow)
		}
		if err == syscall.ENOENT {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "lstat", Path: joinPath(p, n), Err: err}
		}
		out = append(out, fs.FileInfoToDirEntry(&statInfo{name: n, st: st}))
	}
	return out, nil
}

func joinPath(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

func mkdirBeneath(p string, mode uint32) error {
	return atParent("mkdir", p, func(dirfd int, base string) error { return syscall.Mkdirat(dirfd, base, mode) })
}

// mkdirAllBeneath is os.MkdirAll: an existing symlink on the way is ENOTDIR.
func mkdirAllBeneath(p string, mode uint32) error {
	if p == "/" {
		return nil
	}
	if fi, err := lstatBeneath(p); err == nil {
		if fi.IsDir() {
			return nil
		}
		return &fs.PathError{Op: "mkdir", Path: p, Err: syscall.ENOTDIR}
	}
	if err := mkdirAllBeneath(filepath.Dir(p), mode); err != nil {
		return err
	}
	err := mkdirBeneath(p, mode)
	if err != nil && errors.Is(err, fs.ErrExist) {
		if fi, lerr := lstatBeneath(p); lerr == nil && fi.IsDir() {
			return nil
		}
	}
	return err
}

func unlinkBeneath(p string) error {
	return atParent("unlink", p, func(dirfd int, base string) error { return syscall.Unlinkat(dirfd, base) })
}

func rmdirBeneath(p string) error {
	return atParent("rmdir", p, func(dirfd int, base string) error {
		name, err := ptr(base)
		if err != nil {
			return err
		}
		return sysAt(syscall.SYS_UNLINKAT, uintptr(dirfd), name, atRemoveDir)
	})
}

// removeBeneath is os.Remove: a file, a link or an empty directory.
func removeBeneath(p string) error {
	err := unlinkBeneath(p)
	if errors.Is(err, syscall.EISDIR) {
		err = rmdirBeneath(p)
	}
	return err
}

// removeAllBeneath is os.RemoveAll, which itself works with unlinkat/openat
// and O_NOFOLLOW from the parent's fd; it is given that fd's /proc path.
func removeAllBeneath(p string) error {
	return atParent("remove", p, func(dirfd int, base string) error {
		return os.RemoveAll("/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + base)
	})
}

// renameBeneath is rename(2) of two resolved paths.
func renameBeneath(src, dst string) error {
	sfd, sbase, err := parentOf(src)
	if err != nil {
		return err
	}
	defer syscall.Close(sfd)
	dfd, dbase, err := parentOf(dst)
	if err != nil {
		return err
	}
	defer syscall.Close(dfd)
	return syscall.Renameat(sfd, sbase, dfd, dbase)
}

func linkBeneath(src, dst string) error {
	sfd, sbase, err := parentOf(src)
	if err != nil {
		return err
	}
	defer syscall.Close(sfd)
	return atParent("link", dst, func(dirfd int, base string) error {
		s, err := ptr(sbase)
		if err != nil {
			return err
		}
		d, err := ptr(base)
		if err != nil {
			return err
		}
		return sysAt(syscall.SYS_LINKAT, uintptr(sfd), s, uintptr(dirfd), d, 0)
	})
}

func symlinkBeneath(target, p string) error {
	return atParent("symlink", p, func(dirfd int, base string) error {
		t, err := ptr(target)
		if err != nil {
			return err
		}
		name, err := ptr(base)
		if err != nil {
			return err
		}
		return sysAt(syscall.SYS_SYMLINKAT, t, uintptr(dirfd), name)
	})
}

func readlinkBeneath(p string) (string, error) {
	var target string
	err := atParent("readlink", p, func(dirfd int, base string) error {
		name, err := ptr(base)
		if err != nil {
			return err
		}
		for size := 256; ; size *= 2 {
			buf := make([]byte, size)
			n, _, e := syscall.Syscall6(syscall.SYS_READLINKAT, uintptr(dirfd), name, uintptr(unsafe.Pointer(&buf[0])), uintptr(size), 0, 0)
			if e != 0 {
				return e
			}
			if int(n) < size {
				target = string(buf[:n])
				return nil
			}
		}
	})
	return target, err
}

func mknodBeneath(p string, mode uint32, dev int) error {
	return atParent("mknod", p, func(dirfd int, base string) error { return syscall.Mknodat(dirfd, base, mode, dev) })
}

func lchownBeneath(p string, uid, gid int) error {
	return atParent("lchown", p, func(dirfd int, base string) error {
		return syscall.Fchownat(dirfd, base, uid, gid, atSymlinkNofollow)
	})
}

// chmodBeneath changes the mode of the entry itself; a symlink is ELOOP
// (Linux links have no mode). The kernel's fchmodat follows a last symlink,
// so the change goes through an O_PATH fd of the resolved entry instead.
func chmodBeneath(p string, mode uint32) error {
	fd, err := openBeneath(p, oPath, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	if err := syscall.Chmod("/proc/self/fd/"+strconv.Itoa(fd), mode); err != nil {
		return &fs.PathError{Op: "chmod", Path: p, Err: err}
	}
	return nil
}

// chtimesBeneath sets atime and mtime of the entry itself (never a link's target).
func chtimesBeneath(p string, atime, mtime time.Time) error {
	ts := [2]syscall.Timespec{syscall.NsecToTimespec(atime.UnixNano()), syscall.NsecToTimespec(mtime.UnixNano())}
	return atParent("utimes", p, func(dirfd int, base string) error {
		name, err := ptr(base)
		if err != nil {
			return err
		}
		return sysAt(syscall.SYS_UTIMENSAT, uintptr(dirfd), name, uintptr(unsafe.Pointer(&ts[0])), atSymlinkNofollow)
	})
}

// walkBeneath is filepath.WalkDir on the resolving functions above: lexical
// order, fn may return filepath.SkipDir, symlinks are visited, never entered.
func WalkBeneath(root string, fn fs.WalkDirFunc) error {
	fi, err := lstatBeneath(root)
	if err != nil {
		err = fn(root, nil, err)
	} else {
		err = walkEntry(root, fs.FileInfoToDirEntry(fi), fn)
	}
	if err == filepath.SkipDir {
		return nil
	}
	return err
}

func walkEntry(p string, d fs.DirEntry, fn fs.WalkDirFunc) error {
	if err := fn(p, d, nil); err != nil || !d.IsDir() {
		if err == filepath.SkipDir && d.IsDir() {
			err = nil
		}
		return err
	}
	entries, err := readDirBeneath(p)
	if err != nil {
		if err = fn(p, d, err); err != nil {
			if err == filepath.SkipDir {
				err = nil
			}
			return err
		}
	}
	for _, e := range entries {
		if err := walkEntry(joinPath(p, e.Name()), e, fn); err != nil {
			if err == filepath.SkipDir {
				break
			}
			return err
		}
	}
	return nil
}

// statInfo is an os.FileInfo from a raw stat, as package os builds it.
type statInfo struct {
	name string
	st   syscall.Stat_t
}

func (s *statInfo) Name() string       { return s.name }
func (s *statInfo) Size() int64        { return s.st.Size }
func (s *statInfo) ModTime() time.Time { return time.Unix(s.st.Mtim.Unix()) }
func (s *statInfo) IsDir() bool        { return s.Mode().IsDir() }
func (s *statInfo) Sys() any           { return &s.st }
func (s *statInfo) Mode() fs.FileMode {
	m := fs.FileMode(s.st.Mode & 0o777)
	switch s.st.Mode & syscall.S_IFMT {
	case syscall.S_IFBLK:
		m |= fs.ModeDevice
	case syscall.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFDIR:
		m |= fs.ModeDir
	case syscall.S_IFIFO:
		m |= fs.ModeNamedPipe
	case syscall.S_IFLNK:
		m |= fs.ModeSymlink
	case syscall.S_IFSOCK:
		m |= fs.ModeSocket
	}
	if s.st.Mode&syscall.S_ISGID != 0 {
		m |= fs.ModeSetgid
	}
	if s.st.Mode&syscall.S_ISUID != 0 {
		m |= fs.ModeSetuid
	}
	if s.st.Mode&syscall.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return m
}
