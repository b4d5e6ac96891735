package exec

// Environment and executable resolution for commands.

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"krunbox/agent/config"
)

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// envList keeps the first position of each key and the last value given,
// so later layers override earlier ones without reordering.
type envList struct {
	keys []string
	vals map[string]string
}

func (e *envList) set(k, v string) {
	if e.vals == nil {
		e.vals = map[string]string{}
	}
	if _, ok := e.vals[k]; !ok {
		e.keys = append(e.keys, k)
	}
	e.vals[k] = v
}

func (e *envList) get(k string) string { return e.vals[k] }

func (e *envList) strings() []string {
	out := make([]string, 0, len(e.keys))
	for _, k := range e.keys {
		out = append(out, k+"="+e.vals[k])
	}
	return out
}

// buildEnv layers: defaults, create-time env, request env, then the KRUNBOX_*
// variables, which nothing can override.
func buildEnv(c *config.Config, reqEnv map[string]string) (*envList, error) {
	e := &envList{}
	e.set("PATH", defaultPath)
	e.set("HOME", "/root")
	for _, kv := range c.SortedEnv() {
		e.set(kv[0], kv[1])
	}
	keys := make([]string, 0, len(reqEnv))
	for k := range reqEnv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if err := config.CheckEnvKey(k); err != nil {
			return nil, err
		}
		if strings.ContainsRune(reqEnv[k], 0) {
			return nil, fmt.Errorf("environment value of %q contains NUL", k)
		}
		e.set(k, reqEnv[k])
	}
	e.set("KRUNBOX", "1")
	e.set("KRUNBOX_SANDBOX_ID", c.SandboxID)
	e.set("KRUNBOX_IMAGE", c.Image)
	e.set("KRUNBOX_IMAGE_VERSION", c.ImageVersion)
	e.set("KRUNBOX_WORKSPACE", c.Workspace)
	return e, nil
}

// resolveExecutable finds argv0 the way execvp does (PATH search when there is
// no slash), so a missing or non-executable program becomes a clear failReason
// instead of a bare errno. Relative paths resolve against cwd.
func resolveExecutable(argv0, pathVar, cwd string) (string, error) {
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(cwd, p)
	}
	if strings.Contains(argv0, "/") {
		p := abs(argv0)
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("%s: %v", argv0, err)
		}
		return p, nil
	}
	var firstErr error
	for _, dir := range filepath.SplitList(pathVar) {
		if dir == "" {
			dir = "."
		}
		p := abs(filepath.Join(dir, argv0))
		err := checkExecutable(p)
		if err == nil {
			return p, nil
		}
		if firstErr == nil && !os.IsNotExist(err) {
			firstErr = fmt.Errorf("%s: %v", p, err)
		}
	}
	if firstErr != nil {
		return "", firstErr
	}
	return "", fmt.Errorf("%s: command not found in PATH %s", argv0, pathVar)
}

func checkExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return errnoOf(err)
	}
	if st.IsDir() {
		return syscall.EISDIR
	}
	if !st.Mode().IsRegular() {
		return syscall.EACCES
	}
	// Permission bits as the kernel will check them for this process (no caps).
	if err := syscall.Access(p, 1 /* X_OK */); err != nil {
		return err
	}
	return nil
}

func errnoOf(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}
