package fsops

import (
	"errors"
	"path/filepath"
	"time"

	"krunbox/agent/protocol"
)

// fsWrite stores the DATA frames of the stream as the file at path (mode default 0644,
// applied exactly). The bytes go to a temp file beside the target that replaces it only
// after END: CANCEL or connection loss (S218) or a write error leaves the original
// file untouched and no temp file behind. A symlink at path is replaced, not followed.
func Write(s protocol.Stream, r *protocol.FsWriteRequest) {
	if !requestPath(s, &r.Path) {
		return
	}
	p := r.Path
	if fi, err := lstatBeneath(p); err == nil && fi.IsDir() {
		s.Fail(fsErrorf(protocol.CodeFsWrongType, p, "is a directory"))
		return
	}
	if r.Parents {
		if err := mkdirAllBeneath(filepath.Dir(p), 0o755); err != nil {
			s.Fail(fsError(err, p))
			return
		}
	}
	out, err := createAtomic(p)
	if err != nil {
		s.Fail(fsError(err, p))
		return
	}
	total, oe := receiveInto(s, out, p)
	if oe != nil {
		out.abort()
		s.Fail(oe)
		return
	}
	if err := out.commit(r.Mode.Or(0o644), time.Time{}); err != nil {
		s.Fail(fsError(err, p))
		return
	}
	s.Respond(protocol.FsWriteResponse{Bytes: total})
}

// receiveInto copies the host's DATA into f until END.
func receiveInto(s protocol.Stream, f *atomicFile, p string) (int64, *protocol.OpError) {
	var total int64
	for {
		data, eof, err := s.RecvData()
		if err != nil {
			return total, uploadAborted(err, p)
		}
		if len(data) > 0 {
			n, werr := f.Write(data)
			protocol.RecycleData(data) // written: the file has its own copy
			total += int64(n)
			if werr != nil {
				return total, fsError(retarget(werr, p), p)
			}
		}
		if eof {
			return total, nil
		}
	}
}

// uploadAborted is the S218 of an upload whose DATA ended without END.
func uploadAborted(err error, p string) *protocol.OpError {
	reason := err.Error()
	var oe *protocol.OpError
	if errors.As(err, &oe) {
		reason = oe.Message
	}
	return fsErrorf(protocol.CodeFsAborted, p, "upload aborted before its end (%s); the target is untouched", reason)
}
