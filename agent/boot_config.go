package main

// The boot configuration. The namespace driver hands it over in
// KRUNBOX_AGENT_CONFIG. A VM cannot take it that way: libkrun puts the
// environment on the guest kernel command line, which splits at spaces and
// quotes, aborts on non-ASCII, keeps about 2 KiB and is readable by every
// guest process in /proc/cmdline. There the command line carries only
// KRUNBOX_BOOT=vm, and the configuration is config.json in a read-only
// virtio-fs share of its own (tag krunbox-boot) that the agent unmounts once
// read; the host deletes the file once the agent answers.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"
)

const (
	configEnvVar   = "KRUNBOX_AGENT_CONFIG"
	bootEnvVar     = "KRUNBOX_BOOT" // "vm" on a VM's kernel command line
	bootShareTag   = "krunbox-boot"
	bootShareDir   = "/krunbox-boot"
	bootConfigFile = "config.json"
)

type agentConfig struct {
	Mode          string            `json:"mode"` // "namespace" | "vm"
	SandboxID     string            `json:"sandboxId"`
	Image         string            `json:"image"`
	ImageVersion  string            `json:"imageVersion"`
	ListenPath    string            `json:"listenPath"`
	VsockPort     uint32            `json:"vsockPort"`
	LowerDir      string            `json:"lowerDir"`
	LayerDir      string            `json:"layerDir"` // a snapshot's layer (boot_layer.go), or ""
	UpperSizeMb   int64             `json:"upperSizeMb"`
	TokenSha256   string            `json:"tokenSha256"`
	IdleTimeoutMs int64             `json:"idleTimeoutMs"`
	ExpiresAt     int64             `json:"expiresAt"`
	Env           map[string]string `json:"env"`
	PidsMax       int64             `json:"pidsMax"`
	Workspace     string            `json:"workspace"`
	Artifacts     *artifactsConfig  `json:"artifacts"`    // nil: none (artifacts.go)
	User          string            `json:"user"`         // commands' default user (exec_user.go); "" = root
	ResolvConf    string            `json:"resolvConf"`   // see net_resolv.go
	Capabilities  []string          `json:"capabilities"` // held by root's commands (boot_caps.go)
}

// cfg is the configuration of this agent process, set once at boot.
var cfg = &agentConfig{Mode: "namespace", Workspace: "/workspace"}

// bootsAsVM says whether this agent is a VM's PID 1, before any config exists.
func bootsAsVM() bool { return os.Getenv(bootEnvVar) == "vm" }

// earlyMode is how to end the sandbox when the configuration itself fails.
func earlyMode() bootMode {
	if bootsAsVM() {
		return vmMode{}
	}
	return namespaceMode{}
}

func loadConfig() (*agentConfig, error) {
	if bootsAsVM() {
		raw, err := readBootShare()
		if err != nil {
			return nil, err
		}
		return parseConfig(raw)
	}
	raw := os.Getenv(configEnvVar)
	if raw == "" {
		return nil, fmt.Errorf("%s is not set", configEnvVar)
	}
	return parseConfig([]byte(raw))
}

// readBootShare reads config.json from the krunbox-boot share and unmounts
// it, so no guest process can reach it afterwards (they never hold the
// capability to mount it again).
func readBootShare() ([]byte, error) {
	rememberVMRoot()
	if err := os.MkdirAll(bootShareDir, 0o700); err != nil {
		return nil, err
	}
	const flags = syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC
	if err := syscall.Mount(bootShareTag, bootShareDir, "virtiofs", flags, ""); err != nil {
		return nil, fmt.Errorf("mount virtiofs %q on %s: %v", bootShareTag, bootShareDir, err)
	}
	raw, err := os.ReadFile(filepath.Join(bootShareDir, bootConfigFile))
	if errU := syscall.Unmount(bootShareDir, syscall.MNT_DETACH); errU != nil && err == nil {
		err = fmt.Errorf("unmount %s: %v", bootShareDir, errU)
	}
	return raw, err
}

func parseConfig(raw []byte) (*agentConfig, error) {
	c := &agentConfig{}
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, fmt.Errorf("%s is not valid JSON: %v", configEnvVar, err)
	}
	if c.LowerDir == "" {
		c.LowerDir = "/krunbox/image"
	}
	if c.Workspace == "" {
		c.Workspace = "/workspace"
	}
	if c.UpperSizeMb == 0 {
		c.UpperSizeMb = 1024
	}
	switch c.Mode {
	case "namespace":
		if !filepath.IsAbs(c.ListenPath) {
			return nil, fmt.Errorf("listenPath %q must be an absolute path in namespace mode", c.ListenPath)
		}
	case "vm":
		if c.VsockPort == 0 {
			return nil, fmt.Errorf("vsockPort is required in vm mode")
		}
	default:
		return nil, fmt.Errorf("mode %q must be \"namespace\" or \"vm\"", c.Mode)
	}
	if !filepath.IsAbs(c.Workspace) || filepath.Clean(c.Workspace) == "/" {
		return nil, fmt.Errorf("workspace %q must be an absolute path below /", c.Workspace)
	}
	c.Workspace = filepath.Clean(c.Workspace)
	if !filepath.IsAbs(c.LowerDir) {
		return nil, fmt.Errorf("lowerDir %q must be an absolute path", c.LowerDir)
	}
	if c.LayerDir != "" && !filepath.IsAbs(c.LayerDir) {
		return nil, fmt.Errorf("layerDir %q must be an absolute path", c.LayerDir)
	}
	if c.UpperSizeMb < 0 || c.IdleTimeoutMs < 0 || c.ExpiresAt < 0 || c.PidsMax < 0 {
		return nil, fmt.Errorf("upperSizeMb, idleTimeoutMs, expiresAt and pidsMax must not be negative")
	}
	for k := range c.Env {
		if err := checkEnvKey(k); err != nil {
			return nil, fmt.Errorf("create-time env: %v", err)
		}
	}
	return c, nil
}

// sortedEnv returns the create-time env in a stable order.
func (c *agentConfig) sortedEnv() [][2]string {
	keys := make([]string, 0, len(c.Env))
	for k := range c.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([][2]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, [2]string{k, c.Env[k]})
	}
	return out
}
