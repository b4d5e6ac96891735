package fsops

import (
	"archive/tar"
	"bufio"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"krunbox/agent/protocol"
)

// fsTarCreate streams a tar of path as DATA, then RESPONSE {bytes}.
// A directory is archived with names relative to it ("a.txt", "sub/", "sub/b"; the
// directory itself has no entry); a single file or link becomes one entry named by its
// base name. Symlinks are stored as links, never followed; hard links within the tree
// are stored once plus link entries; sockets are left out. Owners are numeric only.
// A file that shrinks while being archived is padded with zeros (the tar stays valid);
// entries removed during the walk are left out. An unreadable entry ends the stream with
// an ERROR (S215 naming it) after the DATA sent so far, which is then no complete tar.

func TarCreate(s protocol.Stream, r *protocol.FsTarCreateRequest) {
	if !requestPath(s, &r.Path) {
		return
	}
	root := r.Path
	rootInfo, oe := lstatOrError(root)
	if oe != nil {
		s.Fail(oe)
		return
	}
	sink := &dataSink{s: s}
	buffered := bufio.NewWriterSize(sink, protocol.DataChunk)
	tw := &treeArchiver{tw: tar.NewWriter(buffered), seen: map[fileID]string{}}
	var err error
	if rootInfo.IsDir() {
		err = WalkBeneath(root, func(p string, d fs.DirEntry, werr error) error {
			if werr != nil {
				return werr
			}
			if cerr := s.Context().Err(); cerr != nil {
				return cerr
			}
			if p == root {
				return nil
			}
			info, ierr := d.Info()
			if ierr == nil {
				ierr = tw.Add(p, strings.TrimPrefix(p[len(root):], "/"), info)
			}
			if Vanished(ierr) {
				return nil // removed while the tree was walked: nothing to archive
			}
			return ierr
		})
	} else {
		err = tw.Add(root, filepath.Base(root), rootInfo)
	}
	if err == nil {
		err = tw.tw.Close()
	}
	if err == nil {
		err = buffered.Flush()
	}
	if sink.failed != nil {
		return // cancelled or connection gone: nobody is listening any more
	}
	if err != nil {
		s.Fail(fsError(err, root))
		return
	}
	s.Respond(protocol.FsTarCreateResponse{Bytes: sink.total})
}

// dataSink is an io.Writer that sends DATA frames.
type dataSink struct {
	s      protocol.Stream
	total  int64
	failed error
}

func (d *dataSink) Write(b []byte) (int, error) {
	if d.failed != nil {
		return 0, d.failed
	}
	if err := d.s.SendData(b); err != nil {
		d.failed = err
		return 0, err
	}
	d.total += int64(len(b))
	return len(b), nil
}

type fileID struct{ dev, ino uint64 }

// treeArchiver writes entries; seen maps a multiply-linked inode to its first name.
type treeArchiver struct {
	tw   *tar.Writer
	seen map[fileID]string
}

// newTreeArchiver writes whole trees to w as one tar (the artifacts at shutdown).
func NewTreeArchiver(w io.Writer) *treeArchiver {
	return &treeArchiver{tw: tar.NewWriter(w), seen: map[fileID]string{}}
}

// close ends the archive; w still has to be flushed.
func (a *treeArchiver) Close() error { return a.tw.Close() }

func (a *treeArchiver) Add(p, name string, fi os.FileInfo) error {
	h := &tar.Header{Name: name, Mode: int64(permBits(fi)), ModTime: fi.ModTime()}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if st != nil {
		h.Uid, h.Gid = int(st.Uid), int(st.Gid)
	}
	switch typ := fi.Mode().Type(); typ {
	case 0:
		if st != nil && st.Nlink > 1 {
			id := fileID{uint64(st.Dev), st.Ino}
			if first, ok := a.seen[id]; ok {
				h.Typeflag, h.Linkname = tar.TypeLink, first
				return a.tw.WriteHeader(h)
			}
			a.seen[id] = name
		}
		return a.addFile(p, h, fi.Size())
	case fs.ModeDir:
		h.Typeflag, h.Name = tar.TypeDir, name+"/"
	case fs.ModeSymlink:
		target, err := readlinkBeneath(p)
		if err != nil {
			return err
		}
		h.Typeflag, h.Linkname = tar.TypeSymlink, target
	case fs.ModeNamedPipe:
		h.Typeflag = tar.TypeFifo
	case fs.ModeDevice, fs.ModeDevice | fs.ModeCharDevice:
		h.Typeflag = tar.TypeBlock
		if typ&fs.ModeCharDevice != 0 {
			h.Typeflag = tar.TypeChar
		}
		if st != nil {
			rdev := uint64(st.Rdev) // Linux dev_t layout, as major(3)/minor(3) decode it
			h.Devmajor = int64((rdev>>8)&0xfff | (rdev>>32)&0xfffff000)
			h.Devminor = int64(rdev&0xff | (rdev>>12)&0xffffff00)
		}
	default:
		return nil // sockets cannot be archived
	}
	return a.tw.WriteHeader(h)
}

// addFile writes a regular file's header and exactly size bytes of content.
func (a *treeArchiver) addFile(p string, h *tar.Header, size int64) error {
	f, _, oe := openRegular(p)
	if oe != nil {
		return oe
	}
	defer f.Close()
	h.Typeflag, h.Size = tar.TypeReg, size
	if err := a.tw.WriteHeader(h); err != nil {
		return err
	}
	n, err := io.CopyN(a.tw, f, size)
	if errors.Is(err, io.EOF) {
		_, err = io.CopyN(a.tw, zeroReader{}, size-n)
	}
	return err
}

// vanished reports an entry that no longer exists (before any of it was written).
func Vanished(err error) bool {
	var oe *protocol.OpError
	if errors.As(err, &oe) {
		return oe.Code == protocol.CodeFsNotFound
	}
	return isNotExist(err)
}

type zeroReader struct{}

func (zeroReader) Read(b []byte) (int, error) {
	for i := range b {
		b[i] = 0
	}
	return len(b), nil
}
