package fsops

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"krunbox/agent/protocol"
)

// Both resolvers (openat2 and the per-component fallback) must refuse the same paths.
func forEachResolver(t *testing.T, run func(t *testing.T)) {
	t.Run("openat2", run)
	t.Run("fallback", func(t *testing.T) {
		was := noOpenat2.Load()
		noOpenat2.Store(true)
		defer noOpenat2.Store(was)
		run(t)
	})
}

func TestBeneathRefusesSymlinksAndMagicLinksOnTheWay(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644)
	os.Symlink(outside, filepath.Join(dir, "ln"))
	os.Symlink("sub", filepath.Join(dir, "rel"))
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	os.WriteFile(filepath.Join(dir, "sub", "f"), []byte("f"), 0o644)
	held, err := os.Open(outside) // like the agent's fd on the control dir
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	magic := "/proc/self/fd/" + strconv.Itoa(int(held.Fd()))
	forEachResolver(t, func(t *testing.T) {
		for _, p := range []string{
			filepath.Join(dir, "ln", "secret"),
			filepath.Join(dir, "rel", "f"),
			magic + "/secret",
			"/proc/self/root" + outside + "/secret",
			"/proc/self/cwd/x",
			"/proc/1/root/etc/passwd",
		} {
			if fd, err := openBeneath(p, syscall.O_RDONLY, 0); err == nil {
				syscall.Close(fd)
				t.Errorf("%s: opened through a link", p)
			}
			if err := mkdirBeneath(p+"-new", 0o755); err == nil {
				t.Errorf("%s-new: created through a link", p)
			}
			oe := fsError(writeThrough(p), p)
			if oe.Code != protocol.CodeFsWrongType && oe.Code != protocol.CodeFsNotFound && oe.Code != protocol.CodeFsDenied {
				t.Errorf("%s: code %s (%s)", p, oe.Code, oe.Message)
			}
		}
		if entries, _ := os.ReadDir(outside); len(entries) != 1 {
			t.Errorf("something was created outside: %v", entries)
		}
		// A final symlink is the link itself for lstat, ELOOP for open.
		fi, err := lstatBeneath(filepath.Join(dir, "ln"))
		if err != nil || fi.Mode()&os.ModeSymlink == 0 {
			t.Errorf("lstat of the link: %v %v", fi, err)
		}
		if _, err := openBeneath(filepath.Join(dir, "ln"), syscall.O_RDONLY, 0); !errors.Is(err, syscall.ELOOP) {
			t.Errorf("open of a final symlink: %v, want ELOOP", err)
		}
		// Real directories work.
		fd, err := openBeneath(filepath.Join(dir, "sub", "f"), syscall.O_RDONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		syscall.Close(fd)
	})
}

func writeThrough(p string) error {
	f, err := createAtomic(p)
	if err != nil {
		return err
	}
	f.abort()
	return nil
}

func TestBeneathOpsWorkOnPlainPaths(t *testing.T) {
	dir := t.TempDir()
	forEachResolver(t, func(t *testing.T) {
		base := filepath.Join(dir, "t"+strconv.FormatBool(noOpenat2.Load()))
		if err := mkdirAllBeneath(filepath.Join(base, "a", "b"), 0o755); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(base, "a", "b", "f")
		out, err := openFileBeneath(f, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			t.Fatal(err)
		}
		out.Close()
		if err := chmodBeneath(f, 0o640); err != nil {
			t.Fatal(err)
		}
		if err := symlinkBeneath("f", f+"-ln"); err != nil {
			t.Fatal(err)
		}
		if target, err := readlinkBeneath(f + "-ln"); err != nil || target != "f" {
			t.Fatalf("readlink: %q %v", target, err)
		}
		if err := renameBeneath(f, f+"2"); err != nil {
			t.Fatal(err)
		}
		entries, err := readDirBeneath(filepath.Join(base, "a", "b"))
		if err != nil || len(entries) != 2 || entries[0].Name() != "f-ln" || entries[1].Name() != "f2" {
			t.Fatalf("readdir: %v %v", entries, err)
		}
		if info, _ := entries[1].Info(); info.Mode().Perm() != 0o640 {
			t.Errorf("mode %v", info.Mode())
		}
		var walked []string
		WalkBeneath(base, func(p string, d os.DirEntry, err error) error {
			walked = append(walked, p[len(base):])
			return err
		})
		if want := "[ /a /a/b /a/b/f-ln /a/b/f2]"; fmtList(walked) != want {
			t.Errorf("walk %s, want %s", fmtList(walked), want)
		}
		if err := removeAllBeneath(base); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(base); !os.IsNotExist(err) {
			t.Errorf("removeAll left %s", base)
		}
	})
}

func fmtList(l []string) string {
	s := "["
	for i, x := range l {
		if i > 0 {
			s += " "
		}
		s += x
	}
	return s + "]"
}
