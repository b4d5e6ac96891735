package fsops

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"krunbox/agent/protocol"
)

// decodeFsRequest parses the REQUEST object into dst; a malformed field is S210.
func decodeFsRequest(req json.RawMessage, dst any) *protocol.OpError {
	if err := json.Unmarshal(req, dst); err != nil {
		return &protocol.OpError{Code: protocol.CodeFsBadRequest, Message: "invalid request: " + err.Error()}
	}
	return nil
}

// decodePathRequest decodes req into dst and validates and cleans the request's path
// field in place; on failure it answers the stream and returns false.
func decodePathRequest(s protocol.Stream, req json.RawMessage, dst any, path *string) bool {
	if err := decodeFsRequest(req, dst); err != nil {
		s.Fail(err)
		return false
	}
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

// fileMode is a permission mode given either as a JSON number (420) or as an octal
// string ("0644", "644", "0o644"). Only the low 12 bits (rwx, setuid, setgid, sticky) are allowed.
type fileMode struct {
	set   bool
	value uint32
}

func (m *fileMode) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*m = fileMode{}
		return nil
	}
	var n uint64
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		digits := strings.TrimPrefix(strings.TrimPrefix(s, "0o"), "0O")
		v, perr := strconv.ParseUint(digits, 8, 32)
		if perr != nil || digits == "" {
			return fmt.Errorf("mode %q is not an octal number", s)
		}
		n = v
	} else if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("mode %s is neither an octal string nor a non-negative integer", string(b))
	}
	if n > 0o7777 {
		return fmt.Errorf("mode %#o has bits beyond 07777", n)
	}
	*m = fileMode{set: true, value: uint32(n)}
	return nil
}

// or returns the mode, or def when the request did not give one.
func (m fileMode) or(def uint32) uint32 {
	if m.set {
		return m.value
	}
	return def
}

// globList accepts a single glob string or an array of globs.
type globList []string

func (g *globList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*g = globList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("globs must be a string or an array of strings, got %s", string(b))
	}
	*g = many
	return nil
}

// boolOr returns *b, or def when the field was absent.
func boolOr(b *bool, def bool) bool {
	if b == nil {
		return def
	}
	return *b
}

// lstatRequested decodes a {path} request and lstats its path (never through a final
// link), failing the stream on either; ls, stat and read start so.
func lstatRequested(s protocol.Stream, req json.RawMessage) (string, os.FileInfo, bool) {
	var r pathRequest
	if !decodePathRequest(s, req, &r, &r.Path) {
		return "", nil, false
	}
	fi, oe := lstatOrError(r.Path)
	if oe != nil {
		s.Fail(oe)
		return "", nil, false
	}
	return r.Path, fi, true
}
