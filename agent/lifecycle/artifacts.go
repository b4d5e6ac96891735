package lifecycle

// Artifacts: when the sandbox ends, however it ends (stop, idle, TTL), the
// agent archives the configured paths (globs) into the host-shared control
// dir before it exits: artifacts.tar (renamed into place once complete and
// synced) and artifacts.json, what was kept. The host copies both out of the
// control dir (lib/artifacts.ts, or the reaper when no host is left).

import (
	"bufio"
	"encoding/json"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"krunbox/agent/boot"
	"krunbox/agent/config"
	"krunbox/agent/fsops"
	"krunbox/agent/protocol"
)

type artifactsManifest struct {
	Files     []string `json:"files"`
	Bytes     int64    `json:"bytes"`
	Truncated bool     `json:"truncated"`
	// Error is a code (S403: over the size cap, what fit was kept; S216: archiving failed).
	Error   *string `json:"error"`
	Message string  `json:"message,omitempty"`
}

func artifactsWanted(a *config.Artifacts, commandFailed bool) bool {
	if a == nil || len(a.Paths) == 0 {
		return false
	}
	switch a.When {
	case "on_success":
		return !commandFailed
	case "on_failure":
		return commandFailed
	}
	return true
}

// collectArtifacts runs in the shutdown sequence, after the commands died and
// before exit.json is written.
func (l *Lifecycle) collectArtifacts() {
	a, ctlDirFd := l.cfg.Artifacts, l.CtlDirFd
	if ctlDirFd < 0 || !artifactsWanted(a, l.commandFailed.Load()) {
		return
	}
	const tmp = ".artifacts.tar.tmp"
	fd, err := syscall.Openat(ctlDirFd, tmp, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC|syscall.O_CLOEXEC|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		log.Printf("artifacts: %v", err)
		return
	}
	f := os.NewFile(uintptr(fd), tmp)
	var m artifactsManifest
	boot.ReadingEverything(func() { m = archiveArtifacts(f, a) })
	_ = f.Sync()
	f.Close()
	if err := syscall.Renameat(ctlDirFd, tmp, ctlDirFd, "artifacts.tar"); err != nil {
		log.Printf("artifacts: %v", err)
	}
	b, _ := json.Marshal(m)
	l.writeCtlFile("artifacts.json", b, true)
}

func archiveArtifacts(f *os.File, a *config.Artifacts) artifactsManifest {
	m := artifactsManifest{Files: []string{}}
	buffered := bufio.NewWriterSize(f, 1<<20)
	tw := fsops.NewTreeArchiver(buffered)
	fail := func(oe *protocol.OpError) {
		if m.Error == nil {
			m.Error, m.Message = &oe.Code, oe.Message
		}
	}
	add := func(p string, info os.FileInfo) error {
		if info.Mode().IsRegular() && m.Bytes+info.Size() > a.MaxBytes {
			m.Truncated = true
			fail(protocol.ArtifactsOverCapError(a.MaxBytes, p))
			return nil
		}
		if err := tw.Add(p, strings.TrimPrefix(p, "/"), info); err != nil {
			if fsops.Vanished(err) {
				return nil
			}
			return err
		}
		if info.Mode().IsRegular() {
			m.Bytes += info.Size()
			m.Files = append(m.Files, p)
		}
		return nil
	}
	for _, pattern := range a.Paths {
		matches, _ := filepath.Glob(pattern)
		for _, root := range matches {
			err := fsops.WalkBeneath(root, func(p string, d fs.DirEntry, werr error) error {
				if werr != nil {
					return werr
				}
				info, err := d.Info()
				if err != nil {
					return nil
				}
				return add(p, info)
			})
			if err != nil && !fsops.Vanished(err) {
				fail(protocol.FsIOError(root, "cannot archive it: "+err.Error()))
			}
		}
	}
	if err := tw.Close(); err != nil {
		fail(protocol.FsIOError(f.Name(), "writing the archive: "+err.Error()))
	}
	if err := buffered.Flush(); err != nil {
		fail(protocol.FsIOError(f.Name(), "writing the archive: "+err.Error()))
	}
	return m
}
