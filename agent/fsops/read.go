package fsops

import (
	"io"

	"krunbox/agent/protocol"
)

// fsRead streams a regular file: EVENT meta, DATA chunks, RESPONSE {bytes}.
// The descriptor stays open for the whole stream, so a rename or unlink of the path
// meanwhile does not change what is sent. Directories, symlinks and other non-regular
// files are S212 (a FIFO or device could block or never end). At most the size in meta is
// sent; a file that shrank meanwhile sends less (RESPONSE bytes says how much).
func Read(s protocol.Stream, r *protocol.FsReadRequest) {
	p, fi, ok := lstatRequested(s, r.Path)
	if !ok {
		return
	}
	if !fi.Mode().IsRegular() {
		s.Fail(notRegularError(p, fi))
		return
	}
	f, fi, oe := openRegular(p)
	if oe != nil {
		s.Fail(oe)
		return
	}
	defer f.Close()
	meta := protocol.FsReadMetaEvent{Type: protocol.EventMeta, Size: fi.Size(), Mode: int64(permBits(fi)), Mtime: fi.ModTime().UnixMilli()}
	if s.Event(meta) != nil {
		return
	}
	// Exactly the size announced in meta, even if the file grows meanwhile: the host holds
	// the agent to it (more is a protocol violation, lib/fs.ts).
	src := io.LimitReader(f, fi.Size())
	var total int64
	for {
		// Each chunk is read straight into a pooled frame buffer; the writer
		// returns it to the pool after the socket write.
		fb := protocol.DataFramePool.Get().(*[]byte)
		n, err := io.ReadFull(src, (*fb)[protocol.FrameHeaderLen:])
		if n > 0 {
			if protocol.SendPooledData(s, fb, n) != nil {
				return // cancelled or connection gone: nobody is listening any more
			}
			total += int64(n)
		} else {
			protocol.DataFramePool.Put(fb)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			s.Fail(fsError(err, p))
			return
		}
	}
	s.Respond(protocol.FsReadResponse{Bytes: total})
}
