package protocol

// Request field types whose decoding is the agent's own (the contract names
// them in a field's "go"): a mode given as a number or an octal string, and
// globs given as one string or a list.

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// FileMode is a permission mode given either as a JSON number (420) or as an octal
// string ("0644", "644", "0o644"). Only the low 12 bits (rwx, setuid, setgid, sticky) are allowed.
type FileMode struct {
	Set   bool
	Value uint32
}

func (m *FileMode) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*m = FileMode{}
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
	*m = FileMode{Set: true, Value: uint32(n)}
	return nil
}

// Or returns the mode, or def when the request did not give one.
func (m FileMode) Or(def uint32) uint32 {
	if m.Set {
		return m.Value
	}
	return def
}

// GlobList accepts a single glob string or an array of globs.
type GlobList []string

func (g *GlobList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*g = GlobList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("globs must be a string or an array of strings, got %s", string(b))
	}
	*g = many
	return nil
}
