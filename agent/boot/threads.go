package boot

// Where the agent shares the sandbox's pids limit with the commands (cgroup v2,
// or no workload leaf), a fork bomb can use it up, and the Go runtime dies
// ("failed to create new OS thread") when it then needs one more thread for a
// goroutine blocked in a syscall.
// Idle threads are kept and reused, so the agent starts a reserve of them at
// boot, while the limit still has room: later needs are met from the pool.

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// threadReserve goroutines each hold a thread at the same time, so at least
// that many exist afterwards. The agent idles with 7; a fork bomb with an
// exec in flight needed a 9th. 8 more cost about 110 KiB of RSS.
const threadReserve = 8

// LimitTasks reserves the threads the agent will need and then, where no
// workload cgroup leaf holds the commands (a host without cgroups), bounds the
// sandbox's tasks by RLIMIT_NPROC: counted per user and user namespace, it
// counts the agent's threads too, so the limit is pidsMax above what the agent
// holds once its reserve is made, plus room for the runtime to start a reserve's
// worth more (a busy host made it start 1-2: the workload then got fewer than
// pidsMax). Set before the reserve (pidsMax alone), a pidsMax below the agent's
// own thread count killed the agent at boot.
func LimitTasks(pidsMax int64, sp *Spawner) error {
	if pidsMax <= 0 {
		return nil
	}
	reserveThreads(sp)
	if sp.limited {
		return nil
	}
	limit := uint64(pidsMax) + uint64(ownThreads()) + threadReserve
	if err := syscall.Setrlimit(6 /* RLIMIT_NPROC */, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
		return fmt.Errorf("setrlimit RLIMIT_NPROC %d: %v", limit, err)
	}
	return nil
}

// ownThreads is the agent's thread count (/proc/self/status), or 0 when unreadable.
func ownThreads() int {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "Threads:") {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "Threads:")))
			return n
		}
	}
	return 0
}

// reserveThreads makes the threads the agent will need before the workload can
// use up a task limit it shares with the agent. With commands in a workload leaf
// of their own (the agent outside its pids.max), there is nothing to reserve
// against, and an idle agent keeps 8 fewer threads (8 instead of 15 here).
func reserveThreads(sp *Spawner) {
	if sp.limited {
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
