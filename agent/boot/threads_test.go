package boot

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestReserveThreadsLeavesThemIdleForLater(t *testing.T) {
	ReserveThreads()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "Threads:") {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "Threads:")))
			if n < threadReserve {
				t.Fatalf("%d threads after reserving %d", n, threadReserve)
			}
			return
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
}
