package config

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"krunbox/agent/egress"
)

// The agent's configuration as the host hands it over at boot (boot/config.go
// says how it arrives), checked once and read-only afterwards.

type Config struct {
	Mode          string `json:"mode"` // "namespace" | "vm"
	SandboxID     string `json:"sandboxId"`
	Image         string `json:"image"`
	ImageVersion  string `json:"imageVersion"`
	ListenPath    string `json:"listenPath"`
	ListenFd      int    `json:"listenFd"` // the socket the host made and listens on at listenPath (0: make it)
	VsockPort     uint32 `json:"vsockPort"`
	LowerDir      string `json:"lowerDir"`
	LayerDir      string `json:"layerDir"` // a snapshot's layer (boot/layer.go), or ""
	UpperSizeMb   int64  `json:"upperSizeMb"`
	TokenSha256   string `json:"tokenSha256"`
	IdleTimeoutMs int64  `json:"idleTimeoutMs"`
	ExpiresAt     int64  `json:"expiresAt"`
	// The latest deadline and the largest idle timeout sandbox.setLifetime may set (the host's
	// maxTtlMs from create, and its idle bound): fixed at boot, so no client can go past them.
	MaxExpiresAt     int64             `json:"maxExpiresAt"`
	MaxIdleTimeoutMs int64             `json:"maxIdleTimeoutMs"`
	Env              map[string]string `json:"env"`
	PidsMax          int64             `json:"pidsMax"`
	Workspace        string            `json:"workspace"`
	Artifacts        *Artifacts        `json:"artifacts"`    // nil: none (lifecycle/artifacts.go)
	User             string            `json:"user"`         // commands' default user (exec/user.go); "" = root
	ResolvConf       string            `json:"resolvConf"`   // see boot/net_resolv.go
	Egress           *egress.Config    `json:"egress"`       // a network policy's relay (agent/egress); nil: none
	Capabilities     []string          `json:"capabilities"` // held by root's commands (boot/caps.go)
	// WorkloadCgroup is the host's workload leaf, as fds it inherits (boot/workload_cgroup.go); nil: none.
	WorkloadCgroup *WorkloadCgroup `json:"workloadCgroup"`
}

// WorkloadCgroup is a cgroup leaf for commands, as open fds: its `tasks` files and its
// memory.oom_control (NoOomControl: none).
type WorkloadCgroup struct {
	TasksFds     []int `json:"tasksFds"`
	OomControlFd int   `json:"oomControlFd"`
}

// NoOomControl marks a leaf without a memory.oom_control (a VM's: the VM's size is its memory limit).
const NoOomControl = -1

type Artifacts struct {
	Paths    []string `json:"paths"`
	MaxBytes int64    `json:"maxBytes"`
	When     string   `json:"when"` // "always" | "on_success" | "on_failure"
}

// configEnvVar carries the configuration in the namespace driver.
const EnvVar = "KRUNBOX_AGENT_CONFIG"

func Parse(raw []byte) (*Config, error) {
	c := &Config{}
	if err := json.Unmarshal(raw, c); err != nil {
		return nil, fmt.Errorf("%s is not valid JSON: %v", EnvVar, err)
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
	if c.UpperSizeMb < 0 || c.IdleTimeoutMs < 0 || c.ExpiresAt < 0 || c.PidsMax < 0 || c.MaxExpiresAt < 0 || c.MaxIdleTimeoutMs < 0 {
		return nil, fmt.Errorf("upperSizeMb, idleTimeoutMs, expiresAt, pidsMax, maxExpiresAt and maxIdleTimeoutMs must not be negative")
	}
	for k := range c.Env {
		if err := CheckEnvKey(k); err != nil {
			return nil, fmt.Errorf("create-time env: %v", err)
		}
	}
	return c, nil
}

// SortedEnv returns the create-time env in a stable order.
func (c *Config) SortedEnv() [][2]string {
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

func CheckEnvKey(k string) error {
	if k == "" || strings.ContainsAny(k, "=\x00") {
		return fmt.Errorf("environment key %q is empty or contains '=' or NUL", k)
	}
	return nil
}
