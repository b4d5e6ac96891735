package exec

import (
	"os"
	"path/filepath"
	"testing"
)

func TestIdMapped(t *testing.T) {
	f := filepath.Join(t.TempDir(), "uid_map")
	// A root host's sandbox: 65 536 ids; a rootless one: only 0.
	if err := os.WriteFile(f, []byte("         0 1000000000      65536\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[uint32]bool{0: true, 1000: true, 65535: true, 65536: false} {
		if got := idMapped(f, id); got != want {
			t.Errorf("id %d mapped: %v, want %v", id, got, want)
		}
	}
	if err := os.WriteFile(f, []byte("0 1000 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if idMapped(f, 1000) || !idMapped(f, 0) {
		t.Error("a one-id map must map 0 only")
	}
}

func TestResolveUserNumeric(t *testing.T) {
	u, err := resolveUser("1234:5678")
	if err != nil || u.uid != 1234 || u.gid != 5678 {
		t.Fatalf("1234:5678 -> %+v %v", u, err)
	}
	if _, err := resolveUser("1:x"); err == nil || err.Code != "S001" {
		t.Fatalf("a non-numeric group: %v", err)
	}
	if u, err := resolveUser(""); u != nil || err != nil {
		t.Fatal("no user is root")
	}
}
