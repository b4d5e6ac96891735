package fsops

// sandbox.snapshot streams the writable layer (the overlay's upper dir: what
// commands and fs ops wrote since boot) as a tar, then RESPONSE {bytes}. The
// host stores it as an immutable layer (lib/snapshots.ts). The walk starts at
// an fd on the upper dir kept from before the pivot and goes one directory fd
// at a time with O_NOFOLLOW, so whatever the workload does meanwhile, nothing
// outside its own layer is ever read. Overlay's own markers travel as tar:
// a whiteout (a 0:0 character device) as a character device entry 0,0, an
// opaque directory (user.overlay.opaque=y) as the PAX record KRUNBOX.opaque=y.
// Entries are sorted by name, so the same layer gives the same stream.

import (
	"archive/tar"
	"bufio"
	"io"
	"os"
	"sort"
	"syscall"
	"time"
	"unsafe"

	"krunbox/agent/protocol"
)

// UpperLayer is the overlay's writable layer as boot left it: DirFd is an fd
// on its upper dir, opened before the pivot (boot.go), or -1 when there is none.
// ReadingEverything, when set, runs the walk where files of every user can be read.
type UpperLayer struct {
	DirFd             int
	ReadingEverything func(func())
}

const opaquePaxKey = "KRUNBOX.opaque"

func (u *UpperLayer) HandleSnapshot(s protocol.Stream, _ *protocol.SandboxSnapshotRequest) {
	if u.DirFd < 0 {
		s.Fail(protocol.UnsupportedError("sandbox.snapshot", "here: this sandbox has no writable layer to snapshot"))
		return
	}
	root, err := syscall.Openat(u.DirFd, ".", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		s.Fail(fsError(err, "/"))
		return
	}
	sink := &dataSink{s: s}
	buffered := bufio.NewWriterSize(sink, protocol.DataChunk)
	w := &layerArchiver{tw: tar.NewWriter(buffered), seen: map[fileID]string{}, stream: s}
	walk := func() {
		err = w.dir(root, "")
		if err == nil {
			err = w.tw.Close()
		}
		if err == nil {
			err = buffered.Flush()
		}
	}
	if u.ReadingEverything != nil {
		u.ReadingEverything(walk)
	} else {
		walk()
	}
	if sink.failed != nil {
		return // cancelled or connection gone
	}
	if err != nil {
		s.Fail(fsError(err, "/"))
		return
	}
	s.Respond(protocol.SandboxSnapshotResponse{Bytes: sink.total})
}

type layerArchiver struct {
	tw     *tar.Writer
	seen   map[fileID]string
	stream protocol.Stream
}

// dir archives the entries of the open directory fd (closed here); rel is its
// path in the sandbox without the leading slash ("" for the root).
func (a *layerArchiver) dir(fd int, rel string) error {
	f := os.NewFile(uintptr(fd), "/"+rel)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		if err := a.stream.Context().Err(); err != nil {
			return err
		}
		p := name
		if rel != "" {
			p = rel + "/" + name
		}
		if err := a.entry(fd, name, p); err != nil {
			return err
		}
	}
	return nil
}

func (a *layerArchiver) entry(dirfd int, name, p string) error {
	var st syscall.Stat_t
	namePtr, err := ptr(name)
	if err != nil {
		return err
	}
	if err := sysAt(sysFstatat, uintptr(dirfd), namePtr, uintptr(unsafe.Pointer(&st)), atSymlinkNofollow); err != nil {
		if err == syscall.ENOENT {
			return nil // removed while the layer was walked
		}
		return &os.PathError{Op: "stat", Path: "/" + p, Err: err}
	}
	h := &tar.Header{Name: p, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid), Gid: int(st.Gid), ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec)}
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		fd, err := syscall.Openat(dirfd, name, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: "/" + p, Err: err}
		}
		h.Typeflag, h.Name = tar.TypeDir, p+"/"
		if isOpaque(fd) {
			h.PAXRecords = map[string]string{opaquePaxKey: "y"}
		}
		if err := a.tw.WriteHeader(h); err != nil {
			syscall.Close(fd)
			return err
		}
		return a.dir(fd, p)
	case syscall.S_IFREG:
		if st.Nlink > 1 {
			id := fileID{uint64(st.Dev), st.Ino}
			if first, ok := a.seen[id]; ok {
				h.Typeflag, h.Linkname = tar.TypeLink, first
				return a.tw.WriteHeader(h)
			}
			a.seen[id] = p
		}
		return a.file(dirfd, name, p, h)
	case syscall.S_IFLNK:
		target, err := readlinkat(dirfd, name)
		if err != nil {
			return &os.PathError{Op: "readlink", Path: "/" + p, Err: err}
		}
		h.Typeflag, h.Linkname = tar.TypeSymlink, target
	case syscall.S_IFCHR:
		if st.Rdev != 0 {
			return nil // only overlay's whiteouts are character devices in a layer
		}
		h.Typeflag = tar.TypeChar
	case syscall.S_IFIFO:
		h.Typeflag = tar.TypeFifo
	default:
		return nil // sockets and block devices are not part of a layer
	}
	return a.tw.WriteHeader(h)
}

// file writes a regular file's header and exactly its size in bytes (zeros
// if it shrank meanwhile, as fs.tarCreate does).
func (a *layerArchiver) file(dirfd int, name, p string, h *tar.Header) error {
	fd, err := syscall.Openat(dirfd, name, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: "/" + p, Err: err}
	}
	f := os.NewFile(uintptr(fd), "/"+p)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil // swapped for something else since the stat
	}
	h.Typeflag, h.Size = tar.TypeReg, fi.Size()
	if err := a.tw.WriteHeader(h); err != nil {
		return err
	}
	n, err := io.CopyN(a.tw, f, h.Size)
	if err == io.EOF {
		_, err = io.CopyN(a.tw, zeroReader{}, h.Size-n)
	}
	return err
}

// isOpaque reads overlay's opaque marker of a directory in the upper layer.
func isOpaque(fd int) bool {
	name, _ := syscall.BytePtrFromString("user.overlay.opaque")
	var buf [4]byte
	n, _, e := syscall.Syscall6(syscall.SYS_FGETXATTR, uintptr(fd), uintptr(unsafe.Pointer(name)), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
	return e == 0 && n >= 1 && buf[0] == 'y'
}

func readlinkat(dirfd int, name string) (string, error) {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 4096)
	n, _, e := syscall.Syscall6(syscall.SYS_READLINKAT, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0)
	if e != 0 {
		return "", e
	}
	return string(buf[:n]), nil
}
