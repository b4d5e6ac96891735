package boot

import "testing"

func threadCount(t *testing.T) int {
	n := ownThreads()
	if n == 0 {
		t.Fatal("no Threads line in /proc/self/status")
	}
	return n
}

func TestReserveThreadsOnlyWhereTheLimitIsShared(t *testing.T) {
	before := threadCount(t)
	if before+1 >= threadReserve {
		t.Skipf("%d threads already: a reserve would not show", before)
	}
	// Commands in a workload leaf of their own, or no limit: nothing to reserve against.
	reserveThreads(&Spawner{limited: true})
	if err := LimitTasks(0, &Spawner{}); err != nil {
		t.Fatal(err)
	}
	if n := threadCount(t); n > before+1 {
		t.Fatalf("%d threads after reserving none (%d before)", n, before)
	}
	reserveThreads(&Spawner{})
	if n := threadCount(t); n < threadReserve {
		t.Fatalf("%d threads after reserving %d", n, threadReserve)
	}
}
