package boot

// Where the agent shares the sandbox's pids limit with the commands (cgroup v2,
// or no workload leaf), a fork bomb can use it up, and the Go runtime dies
// ("failed to create new OS thread") when it then needs one more thread for a
// goroutine blocked in a syscall.
// Idle threads are kept and reused, so the agent starts a reserve of them at
// boot, while the limit still has room: later needs are met from the pool.

import (
	"runtime"
	"sync"
)

// threadReserve goroutines each hold a thread at the same time, so at least
// that many exist afterwards. The agent idles with 7; a fork bomb with an
// exec in flight needed a 9th. 8 more cost about 110 KiB of RSS.
const threadReserve = 8

// ReserveThreads makes the threads the agent will need before the workload can
// use up a task limit it shares with the agent. With no limit, or with commands in a
// workload leaf of their own (the agent outside its pids.max), there is nothing to
// reserve against, and an idle agent keeps 8 fewer threads (8 instead of 15 here).
func ReserveThreads(pidsMax int64, sp *Spawner) {
	if pidsMax <= 0 || sp.limited {
		return
	}
	var locked sync.WaitGroup
	release := make(chan struct{})
	locked.Add(threadReserve)
	for i := 0; i < threadReserve; i++ {
		go func() {
			// Each locked goroutine holds its own thread, so the runtime must
			// start new ones for the rest; unlocked, they go to the idle pool.
			runtime.LockOSThread()
			locked.Done()
			<-release
			runtime.UnlockOSThread()
		}()
	}
	locked.Wait()
	close(release)
}
