package boot

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

func threadCount(t *testing.T) int {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "Threads:") {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "Threads:")))
			return n
		}
	}
	t.Fatal("no Threads line in /proc/self/status")
	return 0
}

func TestReserveThreadsOnlyWhereTheLimitIsShared(t *testing.T) {
	before := threadCount(t)
	if before+1 >= threadReserve {
		t.Skipf("%d threads already: a reserve would not show", before)
	}
	// Commands in a workload leaf of their own, or no limit: nothing to reserve against.
	ReserveThreads(64, &Spawner{limited: true})
	ReserveThreads(0, &Spawner{})
	if n := threadCount(t); n > before+1 {
		t.Fatalf("%d threads after reserving none (%d before)", n, before)
	}
	ReserveThreads(64, &Spawner{})
	if n := threadCount(t); n < threadReserve {
		t.Fatalf("%d threads after reserving %d", n, threadReserve)
	}
}
