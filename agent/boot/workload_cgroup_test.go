package boot

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"krunbox/agent/config"
)

func TestWorkloadOomKillsReadsTheCounter(t *testing.T) {
	sp := &Spawner{}
	if got := sp.OomKills(); got != -1 {
		t.Fatalf("without a leaf: got %d, want -1", got)
	}
	path := filepath.Join(t.TempDir(), "memory.oom_control")
	if err := os.WriteFile(path, []byte("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sp.oomControl = f
	for i := 0; i < 2; i++ { // read from the start every time
		if got := sp.OomKills(); got != 3 {
			t.Fatalf("read %d: got %d, want 3", i, got)
		}
	}
}

// The guest's own workload leaf, made on this host's kernel (a VM cannot boot here): mounting a
// pids hierarchy with the same options attaches to the host's, so the test uses a leaf of its own.
func TestGuestWorkloadLeafBoundsTheCommandsItSpawns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a cgroup hierarchy needs root")
	}
	dir := t.TempDir()
	name := "krunbox-agent-test-" + strconv.Itoa(os.Getpid())
	const pidsMax = 3
	leaf, err := guestWorkloadLeaf(dir, name, pidsMax)
	if err != nil {
		t.Fatal(err)
	}
	if leaf == nil {
		t.Skip("this kernel refuses a pids hierarchy here (a user namespace)")
	}
	leafDir := filepath.Join(dir, name)
	defer func() {
		// Whatever the shell left behind: kill it; the test's own threads (the spawner's, and any
		// the Go runtime started from it) go back to the hierarchy's root; then remove the leaf.
		for {
			tasks, _ := os.ReadFile(filepath.Join(leafDir, "tasks"))
			if len(strings.TrimSpace(string(tasks))) == 0 {
				break
			}
			for _, p := range strings.Fields(string(tasks)) {
				if _, err := os.Stat("/proc/self/task/" + p); err == nil {
					_ = os.WriteFile(filepath.Join(dir, "tasks"), []byte(p), 0)
					continue
				}
				pid, _ := strconv.Atoi(p)
				_ = syscall.Kill(pid, syscall.SIGKILL)
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
			}
			runtime.Gosched()
		}
		_ = os.Remove(leafDir)
		_ = syscall.Unmount(dir, syscall.MNT_DETACH)
	}()
	if leaf.OomControlFd != config.NoOomControl || len(leaf.TasksFds) != 1 {
		t.Fatalf("leaf %+v: want one tasks fd and no oom control", leaf)
	}
	limit, err := os.ReadFile(filepath.Join(leafDir, "pids.max"))
	if err != nil || strings.TrimSpace(string(limit)) != strconv.Itoa(pidsMax+1) {
		t.Fatalf("pids.max %q (%v), want %d: the spawner thread is one task of the leaf", limit, err, pidsMax+1)
	}
	// The spawner's way: one thread joins the leaf, its children are born there.
	status := make(chan syscall.WaitStatus, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		if _, err := syscall.Write(leaf.TasksFds[0], []byte("0")); err != nil {
			t.Errorf("join the leaf: %v", err)
			status <- 0
			return
		}
		pid, err := syscall.ForkExec("/bin/sh", []string{"sh", "-c", "p=; for i in 1 2 3 4 5 6; do sleep 60 & p=\"$p $!\"; done; kill $p"}, &syscall.ProcAttr{})
		if err != nil {
			t.Errorf("fork the shell: %v", err)
			status <- 0
			return
		}
		var ws syscall.WaitStatus
		_, _ = syscall.Wait4(pid, &ws, 0, nil)
		status <- ws
	}()
	if ws := <-status; ws.ExitStatus() == 0 {
		t.Fatalf("the shell started 6 background commands under pids.max %d (status %v)", pidsMax+1, ws)
	}
	events, err := os.ReadFile(filepath.Join(leafDir, "pids.events"))
	if err != nil || !strings.Contains(string(events), "max ") || strings.Contains(string(events), "max 0") {
		t.Fatalf("pids.events %q (%v): want refused forks counted", events, err)
	}
}
