package fsops

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"krunbox/agent/protocol"
)

// fsTarExtract unpacks the tar sent as DATA under path (created, with missing parents,
// when absent), then RESPONSE {entries}.
//
//   - Entry names are relative to path; an absolute name or one with a ".." component
//     is S210 (so are hard-link targets). A "./" entry for the root itself is skipped.
//   - Nothing is written through a symlink: a path component below the target that is a
//     symlink makes the extraction fail with S212. Symlink entries are created as they
//     are, wherever they point.
//   - Files are written to a temp name and renamed into place; an existing file or
//     symlink is replaced, an existing directory is kept (merged) and gets the entry's
//     mode. Directory modes and mtimes are applied at the end, so a read-only directory
//     can still be filled. Owners are not restored (entries belong to the agent's user).
//     Device entries are skipped when mknod is not permitted.
//   - Files are not fsynced one by one (thousands of small files); one sync(2) at the end
//     makes the result durable before RESPONSE.
//   - On failure (CANCEL/connection loss → S218, a corrupt tar → S210, or an fs error) no
//     temp file is left, and the files, links and directories this extraction created
//     are removed again; files it had already replaced keep their new content.

func TarExtract(s protocol.Stream, r *protocol.FsTarExtractRequest) {
	if !requestPath(s, &r.Path) {
		return
	}
	root := r.Path
	ex := &extractor{root: root, realDirs: map[string]bool{}}
	if oe := ex.prepareRoot(); oe != nil {
		s.Fail(oe)
		return
	}
	src := &dataSource{s: s}
	err := ex.extractAll(tar.NewReader(src))
	if err == nil {
		err = src.drain() // zero padding after the end-of-archive blocks
	}
	if err == nil {
		err = ex.finishDirs()
	}
	if err != nil {
		ex.rollback()
		s.Fail(ex.classify(err, src))
		return
	}
	syscall.Sync()
	s.Respond(protocol.FsTarExtractResponse{Entries: int64(ex.entries)})
}

// dataSource reads the host's DATA frames as an io.Reader.
type dataSource struct {
	s   protocol.Stream
	buf []byte
	eof bool
	err error // from RecvData: the upload was aborted
}

func (d *dataSource) Read(p []byte) (int, error) {
	for len(d.buf) == 0 {
		if d.err != nil {
			return 0, d.err
		}
		if d.eof {
			return 0, io.EOF
		}
		data, eof, err := d.s.RecvData()
		if err != nil {
			d.err = err
			return 0, err
		}
		d.buf, d.eof = data, eof
	}
	n := copy(p, d.buf)
	d.buf = d.buf[n:]
	return n, nil
}

func (d *dataSource) drain() error {
	_, err := io.Copy(io.Discard, d)
	return err
}

type dirAttrs struct {
	path  string
	mode  uint32
	mtime time.Time
}

type extractor struct {
	root     string
	realDirs map[string]bool // verified directories (not symlinks) below and at root
	created  []string        // what this extraction created, in creation order
	dirs     []dirAttrs      // directory entries, attributes applied at the end
	entries  int
}

func (ex *extractor) prepareRoot() *protocol.OpError {
	fi, err := lstatBeneath(ex.root)
	if isNotExist(err) {
		if err := mkdirAllBeneath(ex.root, 0o755); err != nil {
			return fsError(err, ex.root)
		}
		ex.created = append(ex.created, ex.root)
	} else if err != nil {
		return fsError(err, ex.root)
	} else if !fi.IsDir() {
		return notDirError(ex.root, fi)
	}
	ex.realDirs[ex.root] = true
	return nil
}

func (ex *extractor) extractAll(tr *tar.Reader) error {
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := ex.entry(h, tr); err != nil {
			return err
		}
	}
}

// inside maps an archive name to a path below root; "" means the root itself.
func (ex *extractor) inside(name, what string) (string, *protocol.OpError) {
	if strings.IndexByte(name, 0) >= 0 || strings.HasPrefix(name, "/") {
		return "", badRequest(ex.root, "tar %s %q is not a relative name", what, name)
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", badRequest(ex.root, "tar %s %q escapes the target directory", what, name)
		}
	}
	clean := path.Clean(name)
	if clean == "." {
		return "", nil
	}
	return filepath.Join(ex.root, clean), nil
}

func (ex *extractor) entry(h *tar.Header, body io.Reader) error {
	t, oe := ex.inside(h.Name, "entry")
	if oe != nil {
		return oe
	}
	if t == "" {
		return nil // "./": the target directory itself
	}
	if err := ex.parents(t, true); err != nil {
		return err
	}
	mode := uint32(h.Mode) & 0o7777
	var err error
	switch h.Typeflag {
	case tar.TypeDir:
		return ex.dir(t, mode, h.ModTime)
	case tar.TypeReg, tar.TypeGNUSparse:
		err = ex.file(t, mode, h.ModTime, body)
	case tar.TypeSymlink:
		err = ex.special(t, func(tmp string) error { return symlinkBeneath(h.Linkname, tmp) })
	case tar.TypeLink:
		src, oe := ex.inside(h.Linkname, "hard link target")
		if oe != nil {
			return oe
		}
		if src == "" {
			return badRequest(ex.root, "tar hard link %q points at the target directory", h.Name)
		}
		if err := ex.parents(src, false); err != nil {
			return err
		}
		err = ex.special(t, func(tmp string) error { return linkBeneath(src, tmp) })
	case tar.TypeFifo:
		err = ex.special(t, func(tmp string) error { return mknodMode(tmp, syscall.S_IFIFO|mode, 0) })
	case tar.TypeChar, tar.TypeBlock:
		kind := uint32(syscall.S_IFCHR)
		if h.Typeflag == tar.TypeBlock {
			kind = syscall.S_IFBLK
		}
		dev := int(mkdev(h.Devmajor, h.Devminor))
		err = ex.special(t, func(tmp string) error { return mknodMode(tmp, kind|mode, dev) })
		if errors.Is(err, syscall.EPERM) {
			return nil // no CAP_MKNOD in the sandbox: skipped
		}
	default:
		return nil // global PAX headers and exotic types carry nothing to create
	}
	if err == nil {
		ex.entries++
	}
	return err
}

// parents verifies (and with create, makes) the directories between root and t,
// refusing any that is a symlink or not a directory.
func (ex *extractor) parents(t string, create bool) error {
	dir := filepath.Dir(t)
	if ex.realDirs[dir] {
		return nil
	}
	rel := strings.TrimPrefix(dir[len(ex.root):], "/")
	cur := ex.root
	for _, part := range strings.Split(rel, "/") {
		cur = filepath.Join(cur, part)
		if ex.realDirs[cur] {
			continue
		}
		fi, err := lstatBeneath(cur)
		switch {
		case isNotExist(err) && create:
			if err := mkdirBeneath(cur, 0o755); err != nil {
				return err
			}
			ex.created = append(ex.created, cur)
		case err != nil:
			return err
		case fi.Mode()&os.ModeSymlink != 0:
			return fsErrorf(protocol.CodeFsWrongType, cur, "is a symlink inside the extraction target; not followed")
		case !fi.IsDir():
			return fsErrorf(protocol.CodeFsWrongType, cur, "not a directory")
		}
		ex.realDirs[cur] = true
	}
	return nil
}

func (ex *extractor) dir(t string, mode uint32, mtime time.Time) error {
	err := mkdirBeneath(t, 0o755)
	if err == nil {
		ex.created = append(ex.created, t)
	} else if fi, lerr := lstatBeneath(t); lerr != nil || !fi.IsDir() {
		if lerr == nil {
			return fsErrorf(protocol.CodeFsWrongType, t, "exists and is not a directory")
		}
		return err
	}
	ex.realDirs[t] = true
	ex.dirs = append(ex.dirs, dirAttrs{t, mode, mtime})
	ex.entries++
	return nil
}

func (ex *extractor) file(t string, mode uint32, mtime time.Time, body io.Reader) error {
	_, statErr := lstatBeneath(t)
	out, err := createAtomic(t)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, body); err != nil {
		out.abort()
		return retarget(err, t)
	}
	if err := out.commitNoSync(mode, mtime); err != nil {
		return err
	}
	if isNotExist(statErr) {
		ex.created = append(ex.created, t)
	}
	return nil
}

// special creates a non-regular entry at a temp name with create, then renames it over t.
func (ex *extractor) special(t string, create func(tmp string) error) error {
	_, statErr := lstatBeneath(t)
	tmp := tempPathFor(t)
	if err := create(tmp); err != nil {
		return retarget(err, t)
	}
	if err := rename(tmp, t); err != nil {
		removeBeneath(tmp)
		return retarget(err, t)
	}
	if isNotExist(statErr) {
		ex.created = append(ex.created, t)
	}
	return nil
}

// finishDirs applies directory modes and mtimes, children before parents.
func (ex *extractor) finishDirs() error {
	for i := len(ex.dirs) - 1; i >= 0; i-- {
		d := ex.dirs[i]
		if err := chmodBeneath(d.path, d.mode); err != nil {
			return err
		}
		chtimesBeneath(d.path, d.mtime, d.mtime)
	}
	return nil
}

// rollback removes what this extraction created, newest first.
func (ex *extractor) rollback() {
	for i := len(ex.created) - 1; i >= 0; i-- {
		removeBeneath(ex.created[i])
	}
}

// classify turns an extraction error into the OpError to send.
func (ex *extractor) classify(err error, src *dataSource) *protocol.OpError {
	if src.err != nil {
		return uploadAborted(src.err, ex.root)
	}
	var oe *protocol.OpError
	var errno syscall.Errno
	if errors.As(err, &oe) || errors.As(err, &errno) {
		return fsError(err, ex.root)
	}
	return badRequest(ex.root, "invalid tar stream: %v", err)
}

func mknodMode(p string, mode uint32, dev int) error {
	if err := mknodBeneath(p, mode, dev); err != nil {
		return err
	}
	return chmodBeneath(p, mode&0o7777) // mknod applies the umask
}

// mkdev encodes a Linux dev_t, as makedev(3) does.
func mkdev(major, minor int64) uint64 {
	ma, mi := uint64(major), uint64(minor)
	return (ma&0xfff)<<8 | (ma&^0xfff)<<32 | mi&0xff | (mi&^0xff)<<12
}
