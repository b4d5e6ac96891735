package protocol

import (
	"strings"
	"testing"
)

// Every generated message names the offending values it was given, under its own code.
func TestErrorMessagesNameTheOffendingValue(t *testing.T) {
	for _, tc := range []struct {
		err   *OpError
		code  string
		wants []string
	}{
		{OutOfRangeError("timeoutMs", ">= 0", -7), CodeOutOfRange, []string{"timeoutMs", ">= 0", "-7"}},
		{NoCommandError("c-9"), CodeNoCommand, []string{`"c-9"`}},
		{NoCommonVersionError([]int{1}, "[7]"), CodeNoCommonVersion, []string{"[1]", "[7]"}},
		{FrameTooLargeError("the answer to exec.list", MaxFramePayload), CodeFrameTooLarge, []string{"exec.list", "4194304"}},
		{UnsupportedError("fs.teleport", "by this agent"), CodeUnsupported, []string{`"fs.teleport"`, "by this agent"}},
		{StreamGapError(3, 9), CodeStreamGap, []string{"seq 3", "seq is 9"}},
		{UserNotMappedError("1000", 1000, "/proc/self/uid_map"), CodeUserNotMapped, []string{`"1000"`, "id 1000", "uid_map"}},
	} {
		if tc.err.Code != tc.code {
			t.Errorf("%q: code %s, want %s", tc.err.Message, tc.err.Code, tc.code)
		}
		for _, w := range tc.wants {
			if !strings.Contains(tc.err.Message, w) {
				t.Errorf("%s %q does not name %q", tc.code, tc.err.Message, w)
			}
		}
	}
}
