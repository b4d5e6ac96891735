package fsops

import (
	"os"
	"path/filepath"
	"strings"

	"krunbox/agent/protocol"
)

// requestPath validates and cleans the request's path field in place; on
// failure it answers the stream and returns false.
func requestPath(s protocol.Stream, path *string) bool {
	clean, bad := cleanPath("path", *path)
	if bad != nil {
		s.Fail(bad)
		return false
	}
	*path = clean
	return true
}

// cleanPath validates a request path and returns it in canonical form.
// Paths must be absolute; "." components, repeated and trailing slashes are removed.
// ".." components are refused rather than resolved: resolving them lexically would
// disagree with the kernel when a component is a symlink.
func cleanPath(field, p string) (string, *protocol.OpError) {
	switch {
	case p == "":
		return "", badRequest("", "%s must not be empty", field)
	case strings.IndexByte(p, 0) >= 0:
		return "", badRequest(p, "%s %q contains a NUL byte", field, p)
	case !strings.HasPrefix(p, "/"):
		return "", badRequest(p, "%s %q must be absolute", field, p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", badRequest(p, "%s %q must not contain '..' components", field, p)
		}
	}
	return filepath.Clean(p), nil
}

// fileMode and globList are the contract's request field types (protocol/request_types.go).
type (
	fileMode = protocol.FileMode
	globList = protocol.GlobList
)

// boolOr returns *b, or def when the field was absent.
func boolOr(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
}

// lstatRequested cleans a request's path and lstats it (never through a final
// link), failing the stream on either; ls, stat and read start so.
func lstatRequested(s protocol.Stream, path string) (string, os.FileInfo, bool) {
	if !requestPath(s, &path) {
		return "", nil, false
	}
	fi, oe := lstatOrError(path)
	if oe != nil {
		s.Fail(oe)
		return "", nil, false
	}
	return path, fi, true
}
