package fsops

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"syscall"

	"krunbox/agent/protocol"
)

// Filesystem error codes are codeFs* of contract_gen.go. Every fs error names the path it is about.

// errnoNames gives the symbolic name of the errnos the host may want to look at.
var errnoNames = map[syscall.Errno]string{
	syscall.ENOENT: "ENOENT", syscall.ENOTDIR: "ENOTDIR", syscall.EISDIR: "EISDIR",
	syscall.EEXIST: "EEXIST", syscall.ENOTEMPTY: "ENOTEMPTY", syscall.EACCES: "EACCES",
	syscall.EPERM: "EPERM", syscall.EIO: "EIO", syscall.ENOSPC: "ENOSPC",
	syscall.EDQUOT: "EDQUOT", syscall.EROFS: "EROFS", syscall.ELOOP: "ELOOP",
	syscall.ENAMETOOLONG: "ENAMETOOLONG", syscall.EINVAL: "EINVAL", syscall.EXDEV: "EXDEV",
	syscall.EBUSY: "EBUSY", syscall.EMLINK: "EMLINK", syscall.ETXTBSY: "ETXTBSY",
	syscall.EFBIG: "EFBIG", syscall.EOPNOTSUPP: "EOPNOTSUPP",
}

// errnoCode maps an errno to its S-code. This is the only errno→code table of the fs ops.
func errnoCode(errno syscall.Errno) string {
	switch errno {
	case syscall.ENOENT:
		return protocol.CodeFsNotFound
	case syscall.ENOTDIR, syscall.EISDIR, syscall.ELOOP:
		// ELOOP: a symlink where a file or directory was expected (beneath.go).
		return protocol.CodeFsWrongType
	case syscall.EEXIST:
		return protocol.CodeFsExists
	case syscall.ENOTEMPTY:
		return protocol.CodeFsNotEmpty
	case syscall.EACCES, syscall.EPERM:
		return protocol.CodeFsDenied
	case syscall.ENAMETOOLONG, syscall.EINVAL:
		// The request itself is unusable (name too long, move a directory into itself).
		return protocol.CodeFsBadRequest
	default:
		// EIO, ENOSPC, EDQUOT, EROFS and anything unexpected.
		return protocol.CodeFsIO
	}
}

// fsError turns err (usually a *PathError/*LinkError from package os) into an OpError.
// It names the path inside a *PathError (the entry that failed during a tree walk) or
// else path. An *OpError passes through, getting path if it had none.
func fsError(err error, path string) *protocol.OpError {
	var op *protocol.OpError
	if errors.As(err, &op) {
		if op.Path == "" {
			op.Path = path
		}
		return op
	}
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Path != "" {
		path = pe.Path
	}
	var errno syscall.Errno
	if !errors.As(err, &errno) {
		return fsErrorf(protocol.CodeFsIO, path, "%v", err)
	}
	name, ok := errnoNames[errno]
	if !ok {
		name = "errno " + strconv.Itoa(int(errno))
	}
	reason := errno.Error()
	if errno == syscall.ELOOP {
		reason = "a symlink on the way (symlinks are not followed)"
	}
	oe := fsErrorf(errnoCode(errno), path, "%s", reason)
	oe.Errno = name
	return oe
}

// pathErrors are the contract's constructors of the codes fsErrorf builds, each {path}: {reason}.
var pathErrors = map[string]func(path, reason any) *protocol.OpError{
	protocol.CodeFsBadRequest: protocol.FsBadRequestError,
	protocol.CodeFsNotFound:   protocol.FsNotFoundError,
	protocol.CodeFsWrongType:  protocol.FsWrongTypeError,
	protocol.CodeFsExists:     protocol.FsExistsError,
	protocol.CodeFsNotEmpty:   protocol.FsNotEmptyError,
	protocol.CodeFsDenied:     protocol.FsDeniedError,
	protocol.CodeFsIO:         protocol.FsIOError,
	protocol.CodeFsBadRegex:   protocol.FsBadRegexError,
	protocol.CodeFsAborted:    protocol.FsAbortedError,
}

// fsErrorf builds an OpError with a given filesystem code; the message starts with the path.
func fsErrorf(code, path, format string, args ...any) *protocol.OpError {
	reason := fmt.Sprintf(format, args...)
	if path == "" {
		// A request with no path yet (a missing field): the reason names the field itself.
		return &protocol.OpError{Code: code, Message: reason}
	}
	build, ok := pathErrors[code]
	if !ok {
		build = protocol.FsIOError // every filesystem template is {path}: {reason}
	}
	oe := build(path, reason)
	oe.Code, oe.Path = code, path
	return oe
}

// badRequest is an S210 for a malformed field of the request.
func badRequest(path, format string, args ...any) *protocol.OpError {
	return fsErrorf(protocol.CodeFsBadRequest, path, format, args...)
}

// isNotExist reports ENOENT behind err.
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }

// lstatOrError is os.Lstat with the error already mapped.
func lstatOrError(path string) (os.FileInfo, *protocol.OpError) {
	fi, err := lstatBeneath(path)
	if err != nil {
		return nil, fsError(err, path)
	}
	return fi, nil
}
