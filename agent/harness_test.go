package main

// In-process agent for tests: the real server, commands and reaper on a unix
// socket in a temp dir, without the PID-1 boot (no namespaces needed).

import (
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"krunbox/agent/config"
	"krunbox/agent/exec"
)

type testAgent struct {
	sock      string
	workspace string
	exits     chan string
}

func startTestAgent(t *testing.T, mutate func(*config.Config)) *testAgent {
	t.Helper()
	ws := t.TempDir()
	c := &config.Config{Mode: "namespace", SandboxID: "sb-test", Image: "debian", ImageVersion: "12",
		Workspace: ws, UpperSizeMb: 64, Env: map[string]string{"CREATE_VAR": "c"}}
	if mutate != nil {
		mutate(c)
	}
	cfg = c
	commands = exec.New(sandboxHooks{})
	handlers = opTable(commands)
	life = newLifecycle()
	ta := &testAgent{workspace: ws, exits: make(chan string, 1)}
	life.exit = func(reason string) { ta.exits <- reason }
	cmds := commands
	cmds.StartReaper()
	srv = newServer()
	ta.sock = filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: ta.sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	s := srv
	go s.serve(unixListener{l})
	lc := life
	t.Cleanup(func() {
		close(lc.stopWatch)
		l.Close()
		// Kill what the test left running and wait until the agent is quiet,
		// so the next test starts from fresh globals.
		cmds.SignalGroups(syscall.SIGKILL)
		defer cmds.StopReaper()
		s.mu.Lock()
		var conns []*conn
		for c := range s.conns {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		for _, c := range conns {
			c.close()
		}
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			life.mu.Lock()
			quiet := life.inflight == 0 && cmds.ActiveCount() == 0
			life.mu.Unlock()
			if quiet {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Errorf("agent not quiet after the test")
	})
	return ta
}
