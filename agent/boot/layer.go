package boot

// A sandbox forked from a snapshot boots with the snapshot's layer between
// its writable layer and the image: lowerdir=<layer>/root:<markers>:<image>.
// The layer on the host holds plain files only (a host without privilege can
// write no whiteout device and no user.* xattr through Node), and its
// deletions come as a list (<layer>/markers.json). The agent turns that list
// into a small tmpfs layer of overlay markers under the snapshot's files: a
// whiteout hides the image's entry, an opaque directory hides the image's
// whole directory, and neither hides anything of the snapshot's own files,
// which sit above them.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"krunbox/agent/config"
)

const (
	layerMarkersFile = "markers.json"
	markersDir       = "/krunbox/markers"
)

type layerMarkers struct {
	Whiteouts []string `json:"whiteouts"`
	Opaque    []string `json:"opaque"`
}

// overlayLower is the lowerdir option for c: the image alone, or a snapshot
// layer and its markers over the image.
func overlayLower(c *config.Config) (string, error) {
	if c.LayerDir == "" {
		return c.LowerDir, nil
	}
	if strings.ContainsAny(c.LayerDir, ",:") {
		return "", fmt.Errorf("layerDir %q must not contain ',' or ':'", c.LayerDir)
	}
	raw, err := os.ReadFile(filepath.Join(c.LayerDir, layerMarkersFile))
	if err != nil {
		return "", fmt.Errorf("snapshot markers: %v", err)
	}
	var m layerMarkers
	if err := json.Unmarshal(raw, &m); err != nil {
		return "", fmt.Errorf("snapshot markers: %v", err)
	}
	if err := os.MkdirAll(markersDir, 0o755); err != nil {
		return "", err
	}
	for _, p := range m.Opaque {
		dir, err := markerPath(p)
		if err != nil {
			return "", err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		if err := syscall.Setxattr(dir, "user.overlay.opaque", []byte("y"), 0); err != nil {
			return "", fmt.Errorf("opaque marker %s: %v", p, err)
		}
	}
	for _, p := range m.Whiteouts {
		file, err := markerPath(p)
		if err != nil {
			return "", err
		}
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return "", err
		}
		// A 0:0 character device is overlay's whiteout; Linux lets anyone make one.
		if err := syscall.Mknod(file, syscall.S_IFCHR|0o000, 0); err != nil && err != syscall.EEXIST {
			return "", fmt.Errorf("whiteout %s: %v", p, err)
		}
	}
	return filepath.Join(c.LayerDir, "root") + ":" + markersDir + ":" + c.LowerDir, nil
}

// markerPath places the sandbox path p in the markers layer, refusing
// anything that is not a clean absolute path below "/".
func markerPath(p string) (string, error) {
	if !filepath.IsAbs(p) || filepath.Clean(p) != p || p == "/" {
		return "", fmt.Errorf("snapshot marker %q is not a clean absolute path", p)
	}
	return markersDir + p, nil
}
