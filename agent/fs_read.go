package main

import (
	"encoding/json"
	"io"
)

// dataChunk is the size of the DATA payloads the agent sends for fs.read and
// fs.tarCreate. 256 KiB pipelines: the host takes one chunk while the next is
// read (1 MiB frames made a 1 MiB read ~40 % slower).
const dataChunk = 256 << 10

// dataFrameSender is the connection stream's zero-copy path for DATA (server_stream.go).
type dataFrameSender interface {
	sendDataFrame(fb *[]byte, n int) error
}

// sendPooledData sends the first n payload bytes of a pooled frame buffer on
// s: handed to the connection's writer where the stream allows (it pools the
// buffer once written), else copied through SendData and pooled here.
func sendPooledData(s Stream, fb *[]byte, n int) error {
	if direct, ok := s.(dataFrameSender); ok {
		return direct.sendDataFrame(fb, n)
	}
	err := s.SendData((*fb)[FrameHeaderLen : FrameHeaderLen+n])
	dataFramePool.Put(fb)
	return err
}

// fsRead streams a regular file: EVENT meta, DATA chunks, RESPONSE {bytes}.
// The descriptor stays open for the whole stream, so a rename or unlink of the path
// meanwhile does not change what is sent. Directories, symlinks and other non-regular
// files are S212 (a FIFO or device could block or never end).
func fsRead(s Stream, req json.RawMessage) {
	var r pathRequest
	if !decodePathRequest(s, req, &r, &r.Path) {
		return
	}
	p := r.Path
	fi, oe := lstatOrError(p)
	if oe != nil {
		s.Fail(oe)
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
	meta := map[string]any{"type": "meta", "size": fi.Size(), "mode": permBits(fi), "mtime": fi.ModTime().UnixMilli()}
	if s.Event(meta) != nil {
		return
	}
	var total int64
	for {
		// Each chunk is read straight into a pooled frame buffer; the writer
		// returns it to the pool after the socket write.
		fb := dataFramePool.Get().(*[]byte)
		n, err := io.ReadFull(f, (*fb)[FrameHeaderLen:])
		if n > 0 {
			if sendPooledData(s, fb, n) != nil {
				return // cancelled or connection gone: nobody is listening any more
			}
			total += int64(n)
		} else {
			dataFramePool.Put(fb)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			s.Fail(fsError(err, p))
			return
		}
	}
	s.Respond(map[string]any{"bytes": total})
}
