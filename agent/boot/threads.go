package boot

// The agent lives in the sandbox's cgroup, so a fork bomb can use up the
// pids limit, and the Go runtime dies ("failed to create new OS thread")
// when it then needs one more thread for a goroutine blocked in a syscall.
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
// use up the sandbox's task limit.
func ReserveThreads() {
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
