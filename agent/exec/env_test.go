package exec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"krunbox/agent/config"
)

func TestBuildEnvLayering(t *testing.T) {
	c := &config.Config{SandboxID: "sb-1", Image: "debian", ImageVersion: "12", Workspace: "/workspace",
		Env: map[string]string{"A": "create", "B": "create", "HOME": "/home/x"}}
	e, err := buildEnv(c, map[string]string{"B": "request", "C": "request", "KRUNBOX_IMAGE": "forged", "PATH": "/opt/bin"})
	if err != nil {
		t.Fatal(err)
	}
	got := e.strings()
	want := []string{
		"PATH=/opt/bin", "HOME=/home/x", "A=create", "B=request", "C=request", "KRUNBOX_IMAGE=debian",
		"KRUNBOX=1", "KRUNBOX_SANDBOX_ID=sb-1", "KRUNBOX_IMAGE_VERSION=12", "KRUNBOX_WORKSPACE=/workspace",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("env:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestBuildEnvDefaults(t *testing.T) {
	e, err := buildEnv(&config.Config{Workspace: "/w"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if e.get("PATH") != defaultPath || e.get("HOME") != "/root" || e.get("KRUNBOX_WORKSPACE") != "/w" {
		t.Fatalf("defaults: %v", e.strings())
	}
}

func TestBuildEnvRejectsBadKeys(t *testing.T) {
	for _, k := range []string{"", "A=B", "A\x00"} {
		if _, err := buildEnv(&config.Config{}, map[string]string{k: "v"}); err == nil {
			t.Errorf("key %q accepted", k)
		}
	}
	if _, err := buildEnv(&config.Config{}, map[string]string{"K": "a\x00b"}); err == nil {
		t.Error("NUL in value accepted")
	}
}

func TestResolveExecutable(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "tool")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "data")
	if err := os.WriteFile(plain, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := resolveExecutable("tool", "/nonexistent:"+dir, "/"); err != nil || p != exe {
		t.Fatalf("PATH search: %q %v", p, err)
	}
	if p, err := resolveExecutable("./tool", "", dir); err != nil || p != exe {
		t.Fatalf("relative to cwd: %q %v", p, err)
	}
	if _, err := resolveExecutable("nope", dir, "/"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("missing: %v", err)
	}
	if _, err := resolveExecutable(dir, "", "/"); err == nil {
		t.Fatal("a directory is not executable")
	}
	// Even root needs an x bit to execute.
	if _, err := resolveExecutable(plain, "", "/"); err == nil {
		t.Fatal("a 0644 file is not executable")
	}
}
