package config

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
)

// The agent's configuration as the host hands it over at boot (boot/config.go
// says how it arrives), checked once and read-only afterwards.

// Config and the structs it holds are generated from the contract
// (protocol/v1.json bootConfig, config_gen.go), as is the host's BootConfig.

// NoOomControl marks a leaf without a memory.oom_control (a VM's: the VM's size is its memory limit).
const NoOomControl = -1

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
