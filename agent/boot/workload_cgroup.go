package boot

// Commands are born outside the agent's own limits. The host gives the agent
// (as inherited fds) the `tasks` files of the sandbox's workload cgroup leaf;
// one dedicated thread, the Spawner, moves itself there and does every fork,
// so each command starts in the workload leaf from its first instruction
// (cgroup v1 keeps threads of one process in different groups, and a child
// inherits the groups of the thread that forked it; memory is still charged
// to the agent's own leaf, through its process leader). The workload can
// then use up its memory, pids and cpu and be the one the kernel stops.
//
// The spawner also runs at a lower priority (nice), which its children
// inherit and cannot undo: with or without cgroups the agent's own threads
// (timeouts, signals, replies) run ahead of the commands they supervise.

import (
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"syscall"

	"krunbox/agent/config"
)

// commandNice is the priority every command starts at.
const commandNice = 10

type forkRequest struct {
	path  string
	argv  []string
	attr  *syscall.ProcAttr
	reply chan forkResult
}

type forkResult struct {
	pid int
	err error
}

// Spawner forks the sandbox's commands, from one thread that sits in the
// workload cgroup leaf when there is one. The zero value forks inline (the
// in-process tests: no boot, no leaf).
type Spawner struct {
	requests chan forkRequest // nil: fork on the calling thread
	// oomControl is the workload leaf's memory.oom_control, or nil.
	oomControl *os.File
	// limited says the workload leaf (pids.max included) holds every command.
	limited bool
	// tid is the spawner thread's (0: none).
	tid int
}

// startSpawner moves the spawner thread into the workload leaf (the host's,
// else the guest's own in a VM), lowers its priority and limits what its
// execs get to commandCaps, before the privileges are dropped. A leaf that was given but cannot be joined fails
// the boot: commands would otherwise run unlimited.
func startSpawner(c *config.Config, m Mode, guestLeaf *config.WorkloadCgroup) *Spawner {
	leaf := c.WorkloadCgroup
	if leaf == nil {
		leaf = guestLeaf
	}
	sp, err := runSpawner(leaf)
	if err != nil {
		Fail(m, StageErr("spawner", err))
	}
	return sp
}

func runSpawner(leaf *config.WorkloadCgroup) (*Spawner, error) {
	ready := make(chan error, 1)
	sp := &Spawner{requests: make(chan forkRequest), limited: leaf != nil}
	go spawnerThread(leaf, sp, ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	if leaf != nil && leaf.OomControlFd != config.NoOomControl {
		f := os.NewFile(uintptr(leaf.OomControlFd), "memory.oom_control")
		if f == nil {
			return nil, fmt.Errorf("oomControlFd %d is not an open file", leaf.OomControlFd)
		}
		syscall.CloseOnExec(leaf.OomControlFd)
		sp.oomControl = f
	}
	return sp, nil
}

// spawnerThread owns one OS thread for good (it ends with the agent), so the
// cgroups, nice value, bounding set and securebits set here apply to every
// fork it makes.
func spawnerThread(leaf *config.WorkloadCgroup, sp *Spawner, ready chan<- error) {
	runtime.LockOSThread()
	if syscall.Gettid() == syscall.Getpid() {
		// The main thread leads the process: its memory cgroup is the one
		// the agent's memory is charged to. Keep it here and use another.
		go spawnerThread(leaf, sp, ready)
		select {}
	}
	if leaf != nil {
		for _, fd := range leaf.TasksFds {
			// "0" moves the writing thread only (tasks, not cgroup.procs).
			_, err := syscall.Write(fd, []byte("0"))
			syscall.Close(fd)
			if err != nil {
				ready <- fmt.Errorf("join the workload cgroup through fd %d: %v", fd, err)
				return
			}
		}
	}
	// PRIO_PROCESS with who 0 is the calling thread on Linux. Only ever lower the priority: a
	// host that itself runs niced (nice 19, say) hands the agent that nice already, and going
	// back up to 10 would need a privilege the sandbox does not have. The raw getpriority
	// answers 20 - nice.
	if prio, err := syscall.Getpriority(syscall.PRIO_PROCESS, 0); err != nil || 20-prio < commandNice {
		if err := syscall.Setpriority(syscall.PRIO_PROCESS, 0, commandNice); err != nil {
			ready <- fmt.Errorf("setpriority %d: %v", commandNice, err)
			return
		}
	}
	// Only this thread forks commands: what execve reads is set here.
	if err := limitExec(commandCaps); err != nil {
		ready <- err
		return
	}
	sp.tid = syscall.Gettid()
	ready <- nil
	for req := range sp.requests {
		pid, err := syscall.ForkExec(req.path, req.argv, req.attr)
		if err == nil {
			makeFirstOomVictim(pid)
		}
		req.reply <- forkResult{pid, err}
	}
}

// ForkExec starts a command from the spawner thread (or inline without one).
func (sp *Spawner) ForkExec(path string, argv []string, attr *syscall.ProcAttr) (int, error) {
	if sp.requests == nil {
		return syscall.ForkExec(path, argv, attr)
	}
	reply := make(chan forkResult, 1)
	sp.requests <- forkRequest{path, argv, attr, reply}
	r := <-reply
	return r.pid, r.err
}

// makeFirstOomVictim raises a command's oom_score_adj to the maximum (no
// privilege needed): where the agent and a command share a memory limit (the
// host's, or the sandbox's without cgroups), the command dies first. Best
// effort: the value is per process, so it cannot come from the Spawner
// thread, a child the command forks before this write keeps the agent's, and
// a command may lower its own back to the agent's 0 (not below).
func makeFirstOomVictim(pid int) {
	f, err := os.OpenFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", os.O_WRONLY, 0)
	if err != nil {
		return
	}
	_, _ = f.Write([]byte("1000"))
	f.Close()
}

// OomKills reads the oom_kill counter of the workload leaf, or -1.
func (sp *Spawner) OomKills() int64 {
	if sp.oomControl == nil {
		return -1
	}
	buf := make([]byte, 512)
	n, err := sp.oomControl.ReadAt(buf, 0)
	if n == 0 && err != nil {
		return -1
	}
	for _, line := range bytes.Split(buf[:n], []byte("\n")) {
		f := bytes.Fields(line)
		if len(f) == 2 && string(f[0]) == "oom_kill" {
			if v, err := strconv.ParseInt(string(f[1]), 10, 64); err == nil {
				return v
			}
		}
	}
	return -1
}
