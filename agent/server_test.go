package main

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"krunbox/agent/config"
	"krunbox/agent/protocol"
)

func TestHandshakeReply(t *testing.T) {
	ta := startTestAgent(t, nil)
	_, h := dialAgent(t, ta.sock, "")
	if h["version"] != float64(1) || h["agent"] != agentVersion || h["sandboxId"] != "sb-test" || h["pid"] != float64(os.Getpid()) {
		t.Fatalf("HELLO reply %v", h)
	}
	if feats, _ := h["features"].([]any); len(feats) != 5 || feats[4] != "ports" {
		t.Fatalf("features %v", h["features"])
	}
}

func expectErrorThenClose(t *testing.T, c *tclient, code string) {
	t.Helper()
	f := c.ctrlFrame(5 * time.Second)
	var e protocol.OpError
	_ = json.Unmarshal(f.Payload, &e)
	if f.Type != protocol.FtError || f.Flags&protocol.FlagEnd == 0 || e.Code != code {
		t.Fatalf("want ERROR %s, got type %#x %s", code, f.Type, f.Payload)
	}
	select {
	case <-c.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("connection not closed after the handshake error")
	}
}

func TestHandshakeVersionMismatch(t *testing.T) {
	ta := startTestAgent(t, nil)
	c := dialRaw(t, ta.sock)
	c.sendJSON(0, protocol.FtHello, 0, map[string]any{"versionMin": 2, "versionMax": 3})
	expectErrorThenClose(t, c, "S202")
}

func TestHandshakeVersionList(t *testing.T) {
	ta := startTestAgent(t, nil)
	// The host lists what it speaks; the agent picks the highest it speaks too.
	c := dialRaw(t, ta.sock)
	c.sendJSON(0, protocol.FtHello, 0, map[string]any{"versions": []int{7, 1, 3}, "versionMin": 0, "versionMax": 0})
	f := c.ctrlFrame(5 * time.Second)
	var h struct{ Version int }
	if err := json.Unmarshal(f.Payload, &h); err != nil || f.Type != protocol.FtHello || h.Version != 1 {
		t.Fatalf("want HELLO version 1, got type %#x %s", f.Type, f.Payload)
	}
	// The list wins over min/max, and a list with nothing in common is refused.
	c = dialRaw(t, ta.sock)
	c.sendJSON(0, protocol.FtHello, 0, map[string]any{"versions": []int{2}, "versionMin": 1, "versionMax": 1})
	expectErrorThenClose(t, c, protocol.CodeNoCommonVersion)
	// A HELLO whose fields have the wrong types is refused the same way.
	c = dialRaw(t, ta.sock)
	c.sendJSON(0, protocol.FtHello, 0, map[string]any{"versions": "1"})
	expectErrorThenClose(t, c, protocol.CodeNoCommonVersion)
}

func TestRequestFieldsCheckedAgainstContract(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	cases := []struct {
		op   string
		args map[string]any
		code string
		says string
	}{
		{protocol.OpExecStart, map[string]any{"argv": "echo hi"}, protocol.CodeBadArgument, `"argv" must be an array`},
		{protocol.OpExecStart, map[string]any{"argv": []any{"echo", 7}}, protocol.CodeBadArgument, `"argv" element 1 must be a string`},
		{protocol.OpExecStart, map[string]any{"argv": []string{"true"}, "timeoutMs": 1.5}, protocol.CodeBadArgument, `"timeoutMs" must be an integer`},
		{protocol.OpExecStart, map[string]any{"argv": []string{"true"}, "env": map[string]any{"A": 1}}, protocol.CodeBadArgument, `value of "A" must be a string`},
		{protocol.OpExecStart, map[string]any{}, protocol.CodeBadArgument, `"argv" is required`},
		{protocol.OpExecCancel, map[string]any{"commandId": "x", "mode": "gentle"}, protocol.CodeBadArgument, `"mode" must be one of`},
		{protocol.OpFsStat, map[string]any{"path": 7}, protocol.CodeFsBadRequest, `"path" must be a string`},
		{protocol.OpFsMkdir, map[string]any{"path": "/tmp/x", "mode": true}, protocol.CodeFsBadRequest, `"mode" must be a string or an integer`},
		{protocol.OpFsGrep, map[string]any{"path": "/", "pattern": "x", "include": []any{1}}, protocol.CodeFsBadRequest, `"include" element 0 must be a string`},
		{protocol.OpPortConnect, map[string]any{"port": "80"}, protocol.CodeBadArgument, `"port" must be an integer`},
	}
	for _, tc := range cases {
		res := c.request(tc.op, tc.args).collect(10 * time.Second)
		code, _ := res.finalJS["code"].(string)
		msg, _ := res.finalJS["message"].(string)
		if res.final.Type != protocol.FtError || code != tc.code || !strings.Contains(msg, tc.says) {
			t.Errorf("%s %v: want %s containing %q, got %s", tc.op, tc.args, tc.code, tc.says, res)
		}
	}
	// Fields that fit (a mode as an octal string, null for an optional field) pass to the handler.
	dir := t.TempDir()
	if r := c.call(protocol.OpFsMkdir, map[string]any{"path": dir + "/m", "mode": "0750", "parents": nil}); r["created"] != true {
		t.Fatalf("mkdir with fitting fields: %v", r)
	}
}

func TestHandshakeToken(t *testing.T) {
	sum := sha256.Sum256([]byte("s3cret"))
	ta := startTestAgent(t, func(c *config.Config) { c.TokenSha256 = hex.EncodeToString(sum[:]) })
	for _, tok := range []any{nil, "wrong"} {
		c := dialRaw(t, ta.sock)
		hello := map[string]any{"versionMin": 1, "versionMax": 1}
		if tok != nil {
			hello["token"] = tok
		}
		c.sendJSON(0, protocol.FtHello, 0, hello)
		expectErrorThenClose(t, c, "S005")
	}
	dialAgent(t, ta.sock, "s3cret")
}

func TestPingPong(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	c.sendRaw(protocol.EncodeFrame(0, protocol.FtPing, 0, []byte("abc")))
	if f := c.ctrlFrame(5 * time.Second); f.Type != protocol.FtPong || string(f.Payload) != "abc" {
		t.Fatalf("PONG: %#x %q", f.Type, f.Payload)
	}
}

func TestExecEchoFollow(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	r := c.request("exec.start", map[string]any{
		"argv": []string{"sh", "-c", "echo hi; echo oops >&2; exit 3"}, "follow": true,
	}).collect(10 * time.Second)
	if len(r.events) != 1 || r.events[0]["type"] != "started" {
		t.Fatalf("events: %v", r.events)
	}
	if st := commandOf(r.events[0])["status"]; st != "running" {
		t.Fatalf("started status %v", st)
	}
	if string(r.output[1]) != "hi\n" || string(r.output[2]) != "oops\n" {
		t.Fatalf("output: %s", r)
	}
	for i, s := range r.seqs {
		if s != uint64(i+1) {
			t.Fatalf("seqs %v must be 1..n", r.seqs)
		}
	}
	cmd := commandOf(r.finalJS)
	if cmd["status"] != "exited" || cmd["exitCode"] != float64(3) || cmd["signal"] != nil || cmd["nextSeq"] != float64(len(r.seqs)+1) {
		t.Fatalf("final %v", cmd)
	}
	// maxRssKb may be null: the shell stays below this test binary's own peak (exec/peak.go).
	u, _ := cmd["usage"].(map[string]any)
	if peak, isNum := u["maxRssKb"].(float64); u == nil || (u["maxRssKb"] != nil && (!isNum || peak <= 0)) {
		t.Fatalf("usage %v", cmd["usage"])
	}
}

func TestExecEnvAndCwd(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	r := c.request("exec.start", map[string]any{
		"argv":   []string{"sh", "-c", `echo "$KRUNBOX $KRUNBOX_SANDBOX_ID $CREATE_VAR $REQ_VAR $HOME"; pwd`},
		"env":    map[string]string{"REQ_VAR": "r"},
		"follow": true,
	}).collect(10 * time.Second)
	want := "1 sb-test c r /root\n" + ta.workspace + "\n"
	if string(r.output[1]) != want {
		t.Fatalf("got %q want %q", r.output[1], want)
	}
}

func TestExecFailures(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	_ = os.WriteFile(filepath.Join(ta.workspace, "data.txt"), []byte("x"), 0o644)
	_ = os.WriteFile(filepath.Join(ta.workspace, "garbage"), []byte("\x01\x02"), 0o755)
	cases := []struct {
		args map[string]any
		want string
	}{
		{map[string]any{"argv": []string{"definitely-not-a-program"}}, "not found"},
		{map[string]any{"argv": []string{"./data.txt"}}, "permission denied"},
		{map[string]any{"argv": []string{"./garbage"}}, "exec format error"},
		{map[string]any{"argv": []string{"true"}, "cwd": "/nonexistent-dir"}, "cwd /nonexistent-dir"},
	}
	for _, tc := range cases {
		r := c.request("exec.start", tc.args).collect(10 * time.Second)
		ev := commandOf(r.events[0])
		fin := commandOf(r.finalJS)
		reason, _ := fin["failReason"].(string)
		if ev["status"] != "failed" || fin["status"] != "failed" || !strings.Contains(reason, tc.want) {
			t.Errorf("%v: started=%v final=%v", tc.args, ev, fin)
		}
	}
	// A malformed request is an ERROR, not a failed command.
	r := c.request("exec.start", map[string]any{"argv": []string{}}).collect(5 * time.Second)
	if r.final.Type != protocol.FtError || !strings.Contains(string(r.final.Payload), "S001") {
		t.Fatalf("empty argv: %s", r.final.Payload)
	}
	r = c.request("exec.start", map[string]any{"argv": "ls"}).collect(5 * time.Second)
	if r.final.Type != protocol.FtError || !strings.Contains(string(r.final.Payload), "S001") {
		t.Fatalf("argv as string: %s", r.final.Payload)
	}
}

func TestExecStdin(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	s := c.request("exec.start", map[string]any{"argv": []string{"cat"}, "stdin": true, "follow": true})
	gotWindow := false
	for !gotWindow {
		f := s.next(5 * time.Second)
		if f.Type == protocol.FtWindow {
			gotWindow = true
		}
	}
	s.sendData([]byte("hello "), false)
	s.sendData([]byte("world"), true)
	r := s.collect(10 * time.Second)
	if string(r.output[1]) != "hello world" || commandOf(r.finalJS)["exitCode"] != float64(0) {
		t.Fatalf("%s", r)
	}
}

func TestExecTimeoutEscalates(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	start := time.Now()
	r := c.request("exec.start", map[string]any{"argv": []string{"sleep", "30"}, "timeoutMs": 200}).collect(10 * time.Second)
	cmd := commandOf(r.finalJS)
	if cmd["status"] != "timed_out" || cmd["timedOut"] != true || cmd["signal"] != "SIGTERM" || cmd["terminationSignal"] != "SIGTERM" {
		t.Fatalf("plain timeout: %v", cmd)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("took %v", el)
	}
	// A group that ignores SIGTERM gets SIGKILL after killGraceMs.
	r = c.request("exec.start", map[string]any{
		"argv": []string{"sh", "-c", `trap "" TERM; sleep 30 & wait`}, "timeoutMs": 200, "killGraceMs": 300,
	}).collect(10 * time.Second)
	cmd = commandOf(r.finalJS)
	if cmd["status"] != "timed_out" || cmd["signal"] != "SIGKILL" || cmd["terminationSignal"] != "SIGKILL" {
		t.Fatalf("escalated timeout: %v", cmd)
	}
}

func TestExitNotDelayedByGrandchildHoldingPipes(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	start := time.Now()
	r := c.request("exec.start", map[string]any{"argv": []string{"sh", "-c", "sleep 5 & echo started"}, "follow": true}).collect(10 * time.Second)
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("exit reported after %v: pipe EOF was awaited", el)
	}
	if string(r.output[1]) != "started\n" || commandOf(r.finalJS)["status"] != "exited" {
		t.Fatalf("%s", r)
	}
}

func TestCancelModes(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	for _, mode := range []string{"graceful", "force"} {
		s := c.request("exec.start", map[string]any{"argv": []string{"sleep", "30"}})
		f := s.next(5 * time.Second)
		var m map[string]any
		_ = json.Unmarshal(f.Payload, &m)
		id := commandOf(m)["id"].(string)
		res := c.call("exec.cancel", map[string]any{"commandId": id, "mode": mode})
		cmd := commandOf(res)
		wantSig := map[string]string{"graceful": "SIGTERM", "force": "SIGKILL"}[mode]
		if cmd["status"] != "canceled" || cmd["cancelMode"] != mode || cmd["terminationSignal"] != wantSig || cmd["canceledAt"] == nil {
			t.Fatalf("%s cancel: %v", mode, cmd)
		}
		fin := s.collect(5 * time.Second)
		if commandOf(fin.finalJS)["status"] != "canceled" {
			t.Fatalf("start stream final: %s", fin.final.Payload)
		}
		// No-op on an ended command.
		again := commandOf(c.call("exec.cancel", map[string]any{"commandId": id, "mode": "force"}))
		if again["cancelMode"] != mode || again["status"] != "canceled" {
			t.Fatalf("second cancel changed the record: %v", again)
		}
	}
	r := c.request("exec.cancel", map[string]any{"commandId": "c-nope"}).collect(5 * time.Second)
	if !strings.Contains(string(r.final.Payload), "S008") {
		t.Fatalf("unknown command: %s", r.final.Payload)
	}
}

func TestSignal(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	s := c.request("exec.start", map[string]any{"argv": []string{"sleep", "30"}})
	var m map[string]any
	_ = json.Unmarshal(s.next(5*time.Second).Payload, &m)
	id := commandOf(m)["id"].(string)
	c.call("exec.signal", map[string]any{"commandId": id, "signal": "SIGINT"})
	fin := commandOf(s.collect(5 * time.Second).finalJS)
	if fin["status"] != "exited" || fin["signal"] != "SIGINT" || fin["exitCode"] != nil {
		t.Fatalf("%v", fin)
	}
	r := c.request("exec.signal", map[string]any{"commandId": id, "signal": "SIGNOPE"}).collect(5 * time.Second)
	if !strings.Contains(string(r.final.Payload), "S001") {
		t.Fatalf("bad signal: %s", r.final.Payload)
	}
}

func runToEnd(t *testing.T, c *tclient, args map[string]any) map[string]any {
	t.Helper()
	r := c.request("exec.start", args).collect(20 * time.Second)
	if r.final.Type != protocol.FtResponse {
		t.Fatalf("exec.start: %s", r.final.Payload)
	}
	return commandOf(r.finalJS)
}

func TestAttachReplayReadAndGap(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	cmd := runToEnd(t, c, map[string]any{"argv": []string{"sh", "-c", "echo one; sleep 0.05; echo two >&2; sleep 0.05; echo three"}})
	id := cmd["id"].(string)

	r := c.request("exec.attach", map[string]any{"commandId": id, "afterSeq": 1, "follow": true}).collect(5 * time.Second)
	if string(r.output[2]) != "two\n" || string(r.output[1]) != "three\n" || r.seqs[0] != 2 {
		t.Fatalf("attach replay: %s seqs=%v", r, r.seqs)
	}
	r = c.request("exec.attach", map[string]any{"commandId": id, "afterSeq": 0, "streams": []string{"stdout"}}).collect(5 * time.Second)
	if string(r.output[1]) != "one\nthree\n" || len(r.output[2]) != 0 {
		t.Fatalf("stdout-only attach: %s", r)
	}

	page := c.call("exec.read", map[string]any{"commandId": id, "afterSeq": 0, "limit": 2})
	chunks := page["chunks"].([]any)
	first := chunks[0].(map[string]any)
	data, _ := base64.StdEncoding.DecodeString(first["data"].(string))
	if len(chunks) != 2 || page["hasMore"] != true || string(data) != "one\n" || first["stream"] != "stdout" || page["nextSeq"] != float64(2) {
		t.Fatalf("exec.read page: %v", page)
	}
	page = c.call("exec.read", map[string]any{"commandId": id, "afterSeq": 2, "limit": 2})
	if len(page["chunks"].([]any)) != 1 || page["hasMore"] != false {
		t.Fatalf("exec.read last page: %v", page)
	}
	r = c.request("exec.read", map[string]any{"commandId": id, "limit": 101}).collect(5 * time.Second)
	if !strings.Contains(string(r.final.Payload), "S003") {
		t.Fatalf("limit 101: %s", r.final.Payload)
	}

	// Tiny retention: early chunks are dropped, attaching before them is a gap.
	cmd = runToEnd(t, c, map[string]any{"argv": []string{"sh", "-c", "for i in 1 2 3 4 5 6; do echo $i; sleep 0.02; done"}, "retainBytes": 4})
	if cmd["stdoutTruncated"] != true || cmd["firstSeq"].(float64) < 2 {
		t.Fatalf("truncation not reported: %v", cmd)
	}
	r = c.request("exec.attach", map[string]any{"commandId": cmd["id"], "afterSeq": 0}).collect(5 * time.Second)
	if r.final.Type != protocol.FtError || !strings.Contains(string(r.final.Payload), "S223") {
		t.Fatalf("gap: %s", r.final.Payload)
	}
}

func TestIdempotencyKey(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	args := map[string]any{"argv": []string{"sh", "-c", "echo run >> runs.txt; echo out"}, "idempotencyKey": "k1", "follow": true}
	a := runToEnd(t, c, args)
	r := c.request("exec.start", args).collect(5 * time.Second)
	b := commandOf(r.finalJS)
	if a["id"] != b["id"] {
		t.Fatalf("ids differ: %v vs %v", a["id"], b["id"])
	}
	if string(r.output[1]) != "out\n" {
		t.Fatalf("the repeated start should replay the output, got %q", r.output[1])
	}
	runs, _ := os.ReadFile(filepath.Join(ta.workspace, "runs.txt"))
	if string(runs) != "run\n" {
		t.Fatalf("command ran %d times", strings.Count(string(runs), "run"))
	}
	list := c.call("exec.list", nil)["commands"].([]any)
	if len(list) != 1 {
		t.Fatalf("exec.list: %v", list)
	}
	got := commandOf(c.call("exec.get", map[string]any{"commandId": a["id"]}))
	if got["id"] != a["id"] || got["status"] != "exited" {
		t.Fatalf("exec.get %v", got)
	}
}

// The host withholds credit: the agent must stop at the window, and with a
// small retention the child itself must block, with nothing lost.
func TestOutputFlowControl(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	const total = 2 << 20
	s := c.requestWithoutCredit("exec.start", map[string]any{
		"argv": []string{"head", "-c", "2097152", "/dev/zero"}, "follow": true, "window": minWindow, "retainBytes": minWindow,
	})
	var got, seq int
	var id string
	drain := func(wait time.Duration) (ended bool) {
		for {
			select {
			case f := <-s.frames:
				switch f.Type {
				case protocol.FtEvent:
					var m map[string]any
					_ = json.Unmarshal(f.Payload, &m)
					id, _ = commandOf(m)["id"].(string)
				case protocol.FtOutput:
					got += len(f.Payload) - protocol.OutputHeaderLen
					seq++
				case protocol.FtResponse:
					return true
				}
			case <-time.After(wait):
				return false
			}
		}
	}
	if drain(300 * time.Millisecond) {
		t.Fatal("finished without any credit granted")
	}
	if got > minWindow || got == 0 {
		t.Fatalf("received %d bytes on a %d-byte window", got, minWindow)
	}
	st := commandOf(c.call("exec.get", map[string]any{"commandId": id}))
	if st["status"] != "running" {
		t.Fatalf("child should be blocked on its pipe, status %v", st["status"])
	}
	// Grant credit as we go, like the host.
	s.autoCredit.Store(true)
	c.sendRaw(protocol.EncodeFrame(s.id, protocol.FtWindow, 0, protocol.WindowPayload(uint32(got))))
	if !drain(10 * time.Second) {
		t.Fatal("did not finish after credit was granted")
	}
	if got != total {
		t.Fatalf("received %d of %d bytes", got, total)
	}
}

func TestUnknownOpsAndViolations(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	r := c.request("fs.nope", nil).collect(5 * time.Second)
	if !strings.Contains(string(r.final.Payload), "S219") {
		t.Fatalf("fs.nope: %s", r.final.Payload)
	}
	r = c.request("bogus.op", nil).collect(5 * time.Second)
	if r.final.Type != protocol.FtError {
		t.Fatalf("bogus.op: %s", r.final.Payload)
	}
	// Even stream id: the connection is closed.
	c.sendRaw(protocol.EncodeFrame(4, protocol.FtRequest, 0, []byte(`{"op":"exec.list"}`)))
	select {
	case <-c.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("even stream id did not close the connection")
	}
	// Reused stream id.
	c2, _ := dialAgent(t, ta.sock, "")
	c2.call("exec.list", nil)
	c2.sendRaw(protocol.EncodeFrame(1, protocol.FtRequest, 0, []byte(`{"op":"exec.list"}`)))
	select {
	case <-c2.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("reused stream id did not close the connection")
	}
	// Oversized frame header.
	c3, _ := dialAgent(t, ta.sock, "")
	hdr := make([]byte, protocol.FrameHeaderLen)
	protocol.PutFrameHeader(hdr, 1, protocol.FtRequest, 0, protocol.MaxFramePayload+1)
	c3.sendRaw(hdr)
	select {
	case <-c3.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("oversized frame did not close the connection")
	}
}

func TestShutdownKillsCommandsAndNotifies(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	s := c.request("exec.start", map[string]any{"argv": []string{"sleep", "30"}})
	s.next(5 * time.Second) // started
	c.call("sandbox.shutdown", nil)
	fin := commandOf(s.collect(5 * time.Second).finalJS)
	if fin["status"] != "killed" || fin["killedReason"] != "sandbox_destroyed" {
		t.Fatalf("command after shutdown: %v", fin)
	}
	f := c.ctrlFrame(5 * time.Second)
	if f.Type != protocol.FtEvent || !strings.Contains(string(f.Payload), `"reason":"user_killed"`) {
		t.Fatalf("stream-0 event: %#x %s", f.Type, f.Payload)
	}
	select {
	case reason := <-ta.exits:
		if reason != "user_killed" {
			t.Fatalf("exit reason %q", reason)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("agent did not exit")
	}
	r := c.request("exec.start", map[string]any{"argv": []string{"true"}}).collect(5 * time.Second)
	if !strings.Contains(string(r.final.Payload), "S004") {
		t.Fatalf("exec after shutdown: %s", r.final.Payload)
	}
}

func TestIdleTimeout(t *testing.T) {
	ta := startTestAgent(t, func(c *config.Config) { c.IdleTimeoutMs = 300 })
	go ta.agent.life.Watch()
	c, _ := dialAgent(t, ta.sock, "")
	// A running command keeps the sandbox alive past the idle timeout.
	start := time.Now()
	runToEnd(t, c, map[string]any{"argv": []string{"sleep", "0.6"}})
	select {
	case reason := <-ta.exits:
		if reason != "idle_expired" {
			t.Fatalf("reason %q", reason)
		}
		if el := time.Since(start); el < 850*time.Millisecond {
			t.Fatalf("idle shutdown after %v: the idle clock must start when the command ended", el)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no idle shutdown")
	}
}

func TestPauseSuspendsTimeouts(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	s := c.request("exec.start", map[string]any{"argv": []string{"sh", "-c", "sleep 0.3; echo done"}, "timeoutMs": 600, "follow": true})
	s.next(5 * time.Second)
	c.call("sandbox.pause", nil)
	if info := c.call("sandbox.info", nil); info["paused"] != true || info["status"] != "paused" || info["activeCommands"] != float64(1) {
		t.Fatalf("info while paused: %v", info)
	}
	time.Sleep(900 * time.Millisecond) // longer than the whole timeout
	c.call("sandbox.resume", nil)
	r := s.collect(5 * time.Second)
	cmd := commandOf(r.finalJS)
	if cmd["status"] != "exited" || string(r.output[1]) != "done\n" {
		t.Fatalf("paused time counted against the timeout: %v %s", cmd, r)
	}
}

// Host→agent credit: the agent grants 1 MiB, then more as stdin is consumed;
// a host exceeding its credit is a protocol violation.
func TestStdinCredit(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	s := c.request("exec.start", map[string]any{"argv": []string{"wc", "-c"}, "stdin": true, "follow": true})
	credit := recvImplicitCredit
	waitCredit := func() {
		for credit <= 0 {
			f := s.next(5 * time.Second)
			if f.Type == protocol.FtWindow {
				credit += int(uint32(f.Payload[0])<<24 | uint32(f.Payload[1])<<16 | uint32(f.Payload[2])<<8 | uint32(f.Payload[3]))
			}
		}
	}
	const total = 5 << 20
	chunk := make([]byte, 32<<10)
	for sent := 0; sent < total; {
		waitCredit()
		n := len(chunk)
		if n > credit {
			n = credit
		}
		if n > total-sent {
			n = total - sent
		}
		s.sendData(chunk[:n], false)
		credit -= n
		sent += n
	}
	s.sendData(nil, true)
	r := s.collect(10 * time.Second)
	if strings.TrimSpace(string(r.output[1])) != "5242880" {
		t.Fatalf("wc -c saw %q", r.output[1])
	}

	s = c.request("exec.start", map[string]any{"argv": []string{"sleep", "5"}, "stdin": true})
	credit = 0
	waitCredit()
	// Every stream also starts with the implicit credit (PROTOCOL.md).
	s.sendData(make([]byte, credit+recvImplicitCredit+1), false)
	select {
	case <-c.closed:
	case <-time.After(5 * time.Second):
		t.Fatal("DATA beyond the granted credit did not close the connection")
	}
}

// The fs handlers (fs*.go) over the real connection: upload and download a
// file bigger than both credit windows.
func TestFsOpsOverRealStreams(t *testing.T) {
	ta := startTestAgent(t, nil)
	c, _ := dialAgent(t, ta.sock, "")
	path := filepath.Join(ta.workspace, "big.bin")
	content := make([]byte, 3<<20+123)
	for i := range content {
		content[i] = byte(i * 7)
	}
	s := c.request("fs.write", map[string]any{"path": path, "mode": 0o644, "parents": false})
	credit, sent := 0, 0
	for sent < len(content) {
		for credit == 0 {
			if f := s.next(5 * time.Second); f.Type == protocol.FtWindow {
				credit += int(uint32(f.Payload[0])<<24 | uint32(f.Payload[1])<<16 | uint32(f.Payload[2])<<8 | uint32(f.Payload[3]))
			} else if f.Type == protocol.FtError {
				t.Fatalf("fs.write: %s", f.Payload)
			}
		}
		n := 100 << 10
		if n > credit {
			n = credit
		}
		if n > len(content)-sent {
			n = len(content) - sent
		}
		s.sendData(content[sent:sent+n], false)
		sent += n
		credit -= n
	}
	s.sendData(nil, true)
	if r := s.collect(10 * time.Second); r.final.Type != protocol.FtResponse {
		t.Fatalf("fs.write: %s", r.final.Payload)
	}
	r := c.request("fs.read", map[string]any{"path": path, "window": 65536}).collect(10 * time.Second)
	if r.final.Type != protocol.FtResponse || string(r.data) != string(content) {
		t.Fatalf("fs.read: %d bytes, final %s", len(r.data), r.final.Payload)
	}
}

// An answer too large for a frame fails only that request with S203.
func TestOversizedAnswerFailsOnlyItsRequest(t *testing.T) {
	if _, err := jsonFrame(1, protocol.FtResponse, protocol.FlagEnd, map[string]string{"big": string(make([]byte, protocol.MaxFramePayload))}); err != protocol.ErrFrameTooLarge {
		t.Fatalf("jsonFrame of an oversized answer: %v", err)
	}
}

// countedChunk counts the references the writer gives back.
type countedChunk struct{ released int }

func (c *countedChunk) Release()                               { c.released++ }
func (c *countedChunk) SpliceTo(syscall.RawConn) (bool, error) { return false, nil }

// An OUTPUT write ends the chunk's reference even when the connection is
// already gone (exec.OutputSender's contract), else its buffer never returns
// to the pool.
func TestWriteToDeadConnectionReleasesTheChunk(t *testing.T) {
	c := &conn{wdead: true}
	c.wcond = sync.NewCond(&c.wmu)
	ch := &countedChunk{}
	if err := c.sendDirect(wpiece{b: []byte("hdr")}, wpiece{b: []byte("data"), chunk: ch}); err != errConnClosed {
		t.Fatalf("sendDirect on a dead connection: %v", err)
	}
	if ch.released != 1 {
		t.Fatalf("the chunk was released %d times", ch.released)
	}
}
