package exec

// Peak RSS of a command. Go starts children with vfork, and at exec Linux
// carries the peak RSS of the memory the child leaves (the agent's) into the
// child's ru_maxrss: a 1 MiB shell would report the agent's own peak. So the
// agent resets its peak just before each spawn and reads it again once the
// child has exec'd (spawns are serialized by forkMu); a ru_maxrss at or below
// that reading may be the agent's, and is reported as unknown (null).

import (
	"bytes"
	"os"
	"strconv"
)

// resetOwnPeakRss sets the agent's peak RSS to its current RSS ("5" in
// /proc/self/clear_refs); failure only makes unknown peaks more likely.
func resetOwnPeakRss() {
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0)
}

// ownPeakRssKb is the agent's VmHWM, or -1 if unreadable (every peak is then unknown).
func ownPeakRssKb() int64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	i := bytes.Index(status, []byte("VmHWM:"))
	if i < 0 {
		return -1
	}
	fields := bytes.Fields(status[i+len("VmHWM:"):])
	if len(fields) == 0 {
		return -1
	}
	kb, err := strconv.ParseInt(string(fields[0]), 10, 64)
	if err != nil {
		return -1
	}
	return kb
}

// commandPeakRssKb is the command's own peak, or nil when maxrss cannot be
// told apart from the agent's peak at spawn.
func commandPeakRssKb(maxrss, agentPeakKb int64) *int64 {
	if agentPeakKb < 0 || maxrss <= agentPeakKb {
		return nil
	}
	return &maxrss
}
