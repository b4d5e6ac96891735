package main

// In-process agent for tests: the real server, commands and reaper on a unix
// socket in a temp dir, without the PID-1 boot (no namespaces needed); one
// agent value per test.

import (
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"krunbox/agent/boot"
	"krunbox/agent/config"
)

type testAgent struct {
	agent     *agent
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
	a := newAgent(c)
	ta := &testAgent{agent: a, workspace: ws, exits: make(chan string, 1)}
	a.life.Exit = func(reason string) { ta.exits <- reason }
	a.commands.StartReaper()
	ta.sock = filepath.Join(t.TempDir(), "agent.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: ta.sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	s := a.server
	go s.serve(boot.UnixListener(l))
	t.Cleanup(func() {
		a.life.StopWatching()
		l.Close()
		// Kill what the test left running and wait until the agent is quiet,
		// so its processes do not disturb the next test.
		a.commands.SignalGroups(syscall.SIGKILL)
		defer a.commands.StopReaper()
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
			if a.life.InFlight() == 0 && a.commands.ActiveCount() == 0 {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Errorf("agent not quiet after the test")
	})
	return ta
}
