package fsops

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"krunbox/agent/protocol"
)

const fsDeniedEnv = "KRUNBOX_FS_DENIED_DIR"

// Permission checks only bite without CAP_DAC_OVERRIDE. As root the test re-runs itself
// as nobody (uid 65534) on a fixture it prepares; otherwise it runs the checks directly.
func TestFsPermissionDenied(t *testing.T) {
	if dir := os.Getenv(fsDeniedEnv); dir != "" {
		fsDeniedChecks(t, dir)
		return
	}
	base, err := os.MkdirTemp("", "krunbox-fs-denied")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		filepath.Walk(base, func(p string, _ os.FileInfo, _ error) error { os.Chmod(p, 0o755); return nil })
		os.RemoveAll(base)
	})
	os.Chmod(base, 0o755)
	fixture := filepath.Join(base, "fixture")
	fsPutFile(t, filepath.Join(fixture, "secret"), "s", 0)
	fsPutFile(t, filepath.Join(fixture, "locked", "inside"), "i", 0o644)
	fsPutFile(t, filepath.Join(fixture, "readonly"), "r", 0o444)
	os.Chmod(filepath.Join(fixture, "locked"), 0)
	os.Chmod(fixture, 0o555)

	if os.Geteuid() != 0 {
		fsDeniedChecks(t, fixture)
		return
	}
	// Copy the test binary where nobody can execute it.
	bin := filepath.Join(base, "fs.test")
	in, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	out, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(out, in)
	in.Close()
	out.Close()
	cmd := exec.Command(bin, "-test.run", "^TestFsPermissionDenied$", "-test.v")
	cmd.Env = append(os.Environ(), fsDeniedEnv+"="+fixture)
	cmd.Dir = base
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	output, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(output), "--- PASS: TestFsPermissionDenied") {
		t.Fatalf("as uid 65534: %v\n%s", err, output)
	}
}

func fsDeniedChecks(t *testing.T, dir string) {
	secret := filepath.Join(dir, "secret")
	locked := filepath.Join(dir, "locked")
	readonly := filepath.Join(dir, "readonly")
	fresh := filepath.Join(dir, "fresh")

	fsCall(t, fsHandler(Read), fsReq{"path": secret}).failed(t, protocol.CodeFsDenied, secret)
	fsCall(t, fsHandler(Ls), fsReq{"path": locked}).failed(t, protocol.CodeFsDenied, locked)
	fsCall(t, fsHandler(Write), fsReq{"path": fresh}, []byte("x")).failed(t, protocol.CodeFsDenied, fresh)
	fsCall(t, fsHandler(Write), fsReq{"path": readonly}, []byte("x")).failed(t, protocol.CodeFsDenied, readonly)
	fsCall(t, fsHandler(Mkdir), fsReq{"path": fresh}).failed(t, protocol.CodeFsDenied, fresh)
	fsCall(t, fsHandler(Rm), fsReq{"path": readonly}).failed(t, protocol.CodeFsDenied, readonly)
	fsCall(t, fsHandler(Mv), fsReq{"src": readonly, "dst": fresh}).failed(t, protocol.CodeFsDenied, readonly)
	fsCall(t, fsHandler(TarCreate), fsReq{"path": dir}).failed(t, protocol.CodeFsDenied, locked)
	fsCall(t, fsHandler(TarExtract), fsReq{"path": filepath.Join(dir, "x")}, fsMakeTar(t)).failed(t, protocol.CodeFsDenied, filepath.Join(dir, "x"))

	var st syscall.Stat_t
	syscall.Stat(readonly, &st)
	if int(st.Uid) != os.Geteuid() {
		fsCall(t, fsHandler(Chmod), fsReq{"path": readonly, "mode": "0777"}).failed(t, protocol.CodeFsDenied, readonly)
	}
	res := fsSedCall(t, fsReq{"files": []string{secret}, "pattern": "s", "replacement": "t"})
	if r := res.Results[0]; r.Success || !strings.HasPrefix(r.Error, "S215: "+secret) {
		t.Errorf("sed on an unreadable file: %+v", r)
	}
	// grep skips what it cannot read.
	var g fsGrepResult
	fsCall(t, fsHandler(Grep), fsReq{"path": dir, "pattern": "r"}).ok(t, &g)
	if len(g.Matches) != 1 || g.Matches[0].Path != readonly {
		t.Errorf("grep %+v", g)
	}
}
