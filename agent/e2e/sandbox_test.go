package e2e

// Boots the real agent as PID 1 under bubblewrap, exactly as the host does,
// with a busybox root filesystem as the image.

import (
	"bufio"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce  sync.Once
	agentBin   string
	rootfsDir  string
	prepareErr string
	workDir    string
)

// staticBusybox finds a statically linked busybox (the image must not need a loader).
func staticBusybox() string {
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		static := true
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				static = false
			}
		}
		f.Close()
		if static {
			return p
		}
	}
	return ""
}

// prepare builds the agent and a busybox rootfs once, in a dir every test
// identity (root, nobody) can read.
func prepare(t testing.TB) {
	buildOnce.Do(func() {
		if _, err := exec.LookPath("bwrap"); err != nil {
			prepareErr = "bwrap not installed"
			return
		}
		bb := staticBusybox()
		if bb == "" {
			prepareErr = "no static busybox (apt-get install busybox-static)"
			return
		}
		dir, err := os.MkdirTemp("", "krunbox-e2e-")
		if err != nil {
			prepareErr = err.Error()
			return
		}
		workDir = dir
		_ = os.Chmod(dir, 0o755)
		agentBin = filepath.Join(dir, "krunbox-agent")
		build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", agentBin, ".")
		build.Dir = ".."
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			prepareErr = fmt.Sprintf("build agent: %v\n%s", err, out)
			return
		}
		rootfsDir = filepath.Join(dir, "rootfs")
		if err := makeRootfs(rootfsDir, bb); err != nil {
			prepareErr = err.Error()
		}
	})
	if prepareErr != "" {
		t.Skip(prepareErr)
	}
}

func makeRootfs(root, busybox string) error {
	for _, d := range []string{"bin", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	data, err := os.ReadFile(busybox)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "bin/busybox"), data, 0o755); err != nil {
		return err
	}
	out, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		return err
	}
	for _, applet := range strings.Fields(string(out)) {
		if applet != "busybox" {
			_ = os.Symlink("busybox", filepath.Join(root, "bin", applet))
		}
	}
	return os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644)
}

type sandbox struct {
	t        testing.TB
	cmd      *exec.Cmd
	ctl      string
	sock     string
	readyIn  time.Duration
	exited   chan struct{}
	exitCode int
	stderr   *strings.Builder
}

type bootOpts struct {
	uid    int // 0: as the test's user; else setuid to this uid/gid before bwrap
	config map[string]any
}

// bwrapArgs is the command line the host uses (see the agent brief), plus
// --proc: the kernel only lets the agent mount a fresh proc when one is visible.
func bwrapArgs(image, ctl, agent string) []string {
	return []string{
		"--unshare-user", "--uid", "0", "--gid", "0",
		"--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--hostname", "krunbox",
		"--die-with-parent", "--new-session", "--as-pid-1", "--cap-add", "ALL",
		"--dev", "/dev", "--tmpfs", "/krunbox", "--proc", "/krunbox/proc",
		"--ro-bind", image, "/krunbox/image",
		"--bind", ctl, "/krunbox/ctl",
		"--ro-bind", agent, "/krunbox/agent",
		"/krunbox/agent",
	}
}

func boot(t testing.TB, o bootOpts) *sandbox {
	t.Helper()
	ctl, err := os.MkdirTemp(workDir, "ctl-")
	if err != nil {
		t.Fatal(err)
	}
	if o.uid != 0 {
		_ = os.Chown(ctl, o.uid, o.uid)
	}
	conf := map[string]any{
		"mode": "namespace", "sandboxId": "sb-e2e", "image": "busybox", "imageVersion": "1",
		"listenPath": "/krunbox/ctl/agent.sock", "lowerDir": "/krunbox/image", "upperSizeMb": 64,
		"tokenSha256": "", "idleTimeoutMs": 0, "expiresAt": 0, "env": map[string]string{"CREATED": "yes"},
		"pidsMax": 0, "workspace": "/workspace",
	}
	for k, v := range o.config {
		conf[k] = v
	}
	confJSON, _ := json.Marshal(conf)
	s := &sandbox{t: t, ctl: ctl, sock: filepath.Join(ctl, "agent.sock"), exited: make(chan struct{}), stderr: &strings.Builder{}}
	s.cmd = exec.Command("bwrap", bwrapArgs(rootfsDir, ctl, agentBin)...)
	s.cmd.Env = []string{"KRUNBOX_AGENT_CONFIG=" + string(confJSON)}
	if o.uid != 0 {
		s.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(o.uid), Gid: uint32(o.uid)}}
	}
	stdout, _ := s.cmd.StdoutPipe()
	s.cmd.Stderr = s.stderr
	start := time.Now()
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	s.readyIn = time.Since(start)
	go func() {
		_ = s.cmd.Wait()
		s.exitCode = s.cmd.ProcessState.ExitCode()
		close(s.exited)
	}()
	if err != nil || line != "READY\n" {
		<-s.exited
		t.Fatalf("no READY (%q, %v); exit %d; stderr:\n%s", line, err, s.exitCode, s.stderr.String())
	}
	t.Cleanup(func() {
		_ = s.cmd.Process.Kill()
		<-s.exited
	})
	return s
}

func (s *sandbox) waitExit(timeout time.Duration) int {
	s.t.Helper()
	select {
	case <-s.exited:
		return s.exitCode
	case <-time.After(timeout):
		s.t.Fatalf("sandbox still running after %v", timeout)
	}
	return -1
}

func (s *sandbox) exitFile() map[string]any {
	s.t.Helper()
	b, err := os.ReadFile(filepath.Join(s.ctl, "exit.json"))
	if err != nil {
		s.t.Fatalf("exit.json: %v", err)
	}
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

// exercise runs a command, checks isolation, then shuts the sandbox down.
func exercise(t *testing.T, s *sandbox) {
	c := dial(t, s.sock)
	out, cmd := c.run("echo", "hi")
	if out != "hi\n" || cmd["exitCode"] != float64(0) {
		t.Fatalf("echo hi: %q %v", out, cmd)
	}
	checkIsolation(t, c)
	// fs ops run with the same (capability-free) credentials as commands.
	if r := c.call("fs.ls", map[string]any{"path": "/"}); r.isError || !strings.Contains(fmt.Sprint(r.final["entries"]), "workspace") {
		t.Fatalf("fs.ls /: %v", r.final)
	}
	if r := c.call("fs.mkdir", map[string]any{"path": "/proc/x", "mode": 0o755, "parents": false}); !r.isError {
		t.Fatalf("fs.mkdir in /proc should fail: %v", r.final)
	}
	if r := c.call("sandbox.shutdown", nil); r.isError {
		t.Fatalf("shutdown: %v", r.final)
	}
	if code := s.waitExit(5 * time.Second); code != 0 {
		t.Fatalf("exit status %d, want 0", code)
	}
	if ef := s.exitFile(); ef["reason"] != "user_killed" || ef["at"] == nil {
		t.Fatalf("exit.json %v", ef)
	}
}

func TestBootExecShutdown(t *testing.T) {
	prepare(t)
	s := boot(t, bootOpts{})
	t.Logf("READY after %v", s.readyIn)
	exercise(t, s)
}

func checkIsolation(t *testing.T, c *client) {
	t.Helper()
	status, _ := c.run("sh", "-c", "grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs)' /proc/self/status")
	for _, line := range strings.Split(strings.TrimSpace(status), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || (f[0] == "NoNewPrivs:" && f[1] != "1") || (f[0] != "NoNewPrivs:" && strings.Trim(f[1], "0") != "") {
			t.Fatalf("privileges left: %q", status)
		}
	}
	out, _ := c.run("sh", "-c", "ls /krunbox 2>&1; cat /proc/1/environ 2>&1 >/dev/null; ls /proc/1/root 2>&1 >/dev/null; kill -TERM 1; kill -INT 1; echo alive")
	if !strings.Contains(out, "No such file") || strings.Count(out, "Permission denied") < 2 || !strings.HasSuffix(out, "alive\n") {
		t.Fatalf("isolation: %q", out)
	}
	out, _ = c.run("sh", "-c", `echo "$KRUNBOX $KRUNBOX_SANDBOX_ID $CREATED"; pwd; id -u; echo data > /workspace/f && cat /workspace/f`)
	if out != "1 sb-e2e yes\n/workspace\n0\ndata\n" {
		t.Fatalf("environment: %q", out)
	}
}

// Rootless: bwrap started by an unprivileged user (nobody). The socket must
// belong to that user with mode 0600. (The test connects as root, which DAC
// allows; the agent does not care who connects.)
func TestRootless(t *testing.T) {
	prepare(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to start bwrap as another user")
	}
	s := boot(t, bootOpts{uid: 65534})
	t.Logf("READY after %v", s.readyIn)
	st, err := os.Stat(s.sock)
	if err != nil {
		t.Fatal(err)
	}
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 65534 || st.Mode().Perm() != 0o600 {
		t.Fatalf("socket owner %d mode %v", sys.Uid, st.Mode())
	}
	exercise(t, s)
}

func TestIdleAndTTLShutdown(t *testing.T) {
	prepare(t)
	s := boot(t, bootOpts{config: map[string]any{"idleTimeoutMs": 300}})
	// The idle clock starts at the first handshake.
	dial(t, s.sock)
	if code := s.waitExit(5 * time.Second); code != 10 {
		t.Fatalf("idle exit %d, want 10; stderr %s", code, s.stderr)
	}
	if ef := s.exitFile(); ef["reason"] != "idle_expired" {
		t.Fatalf("exit.json %v", ef)
	}

	s = boot(t, bootOpts{config: map[string]any{"expiresAt": time.Now().Add(700 * time.Millisecond).UnixMilli()}})
	c := dial(t, s.sock)
	_, ch := c.open("exec.start", map[string]any{"argv": []string{"sleep", "30"}})
	r := collect(t, ch, 5*time.Second)
	cmd, _ := r.final["command"].(map[string]any)
	if cmd["status"] != "killed" || cmd["killedReason"] != "sandbox_destroyed" {
		t.Fatalf("command at TTL: %v", r.final)
	}
	ev := c.ctrlFrame(5 * time.Second)
	if ev.typ != tEvent || !strings.Contains(string(ev.payload), "ttl_expired") {
		t.Fatalf("stream-0 event %d %s", ev.typ, ev.payload)
	}
	if code := s.waitExit(5 * time.Second); code != 11 {
		t.Fatalf("ttl exit %d, want 11", code)
	}
}

func TestPauseStopsEverything(t *testing.T) {
	prepare(t)
	s := boot(t, bootOpts{})
	c := dial(t, s.sock)
	_, ch := c.open("exec.start", map[string]any{
		"argv": []string{"sh", "-c", "while true; do echo tick; sleep 0.02; done"}, "follow": true,
	})
	countFor := func(d time.Duration) int {
		n := 0
		deadline := time.After(d)
		for {
			select {
			case f := <-ch:
				if f.typ == tOutput {
					n++
				}
			case <-deadline:
				return n
			}
		}
	}
	if n := countFor(300 * time.Millisecond); n == 0 {
		t.Fatal("no ticks before pause")
	}
	c.call("sandbox.pause", nil)
	countFor(50 * time.Millisecond) // in flight before the stop
	if n := countFor(400 * time.Millisecond); n != 0 {
		t.Fatalf("%d ticks while paused", n)
	}
	c.call("sandbox.resume", nil)
	if n := countFor(300 * time.Millisecond); n == 0 {
		t.Fatal("no ticks after resume")
	}
}

// A boot failure is one JSON line {stage, error} on stderr and exit status 70.
func TestBootFailureReport(t *testing.T) {
	prepare(t)
	run := func(args []string, conf string) (int, map[string]string) {
		cmd := exec.Command("bwrap", args...)
		cmd.Env = []string{"KRUNBOX_AGENT_CONFIG=" + conf}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		_ = cmd.Run()
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		var rep map[string]string
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil {
			t.Fatalf("stderr is not a JSON report: %q", stderr.String())
		}
		return cmd.ProcessState.ExitCode(), rep
	}
	ctl, _ := os.MkdirTemp(workDir, "ctl-")
	args := bwrapArgs(rootfsDir, ctl, agentBin)

	code, rep := run(args, `{"mode":"teleport"}`)
	if code != 70 || rep["stage"] != "config" || !strings.Contains(rep["error"], "teleport") {
		t.Fatalf("bad config: exit %d %v", code, rep)
	}

	// Without a visible proc the kernel refuses a fresh one; the report says what to add.
	var noProc []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--proc" {
			i++
			continue
		}
		noProc = append(noProc, args[i])
	}
	good := `{"mode":"namespace","sandboxId":"x","listenPath":"/krunbox/ctl/agent.sock","upperSizeMb":16}`
	code, rep = run(noProc, good)
	if code != 70 || rep["stage"] != "rootfs" || !strings.Contains(rep["error"], "--proc /krunbox/proc") {
		t.Fatalf("no proc: exit %d %v", code, rep)
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	if workDir != "" {
		// ctl dirs of rootless runs belong to nobody; root removes them anyway.
		_ = os.RemoveAll(workDir)
	}
	os.Exit(code)
}
