package main

// The boot configuration handed over by the host in KRUNBOX_AGENT_CONFIG.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

const configEnvVar = "KRUNBOX_AGENT_CONFIG"

type agentConfig struct {
	Mode          string            `json:"mode"` // "namespace" | "vm"
	SandboxID     string            `json:"sandboxId"`
	Image         string            `json:"image"`
	ImageVersion  string            `json:"imageVersion"`
	ListenPath    string            `json:"listenPath"`
	VsockPort     uint32            `json:"vsockPort"`
	LowerDir      string            `json:"lowerDir"`
	UpperSizeMb   int64             `json:"upperSizeMb"`
	TokenSha256   string            `json:"tokenSha256"`
	IdleTimeoutMs int64             `json:"idleTimeoutMs"`
	ExpiresAt     int64             `json:"expiresAt"`
	Env           map[string]string `json:"env"`
	PidsMax       int64             `json:"pidsMax"`
	Workspace     string            `json:"workspace"`
}

// cfg is the configuration of this agent process, set once at boot.
var cfg = &agentConfig{Mode: "namespace", Workspace: "/workspace"}

func loadConfig() (*agentConfig, error) {
	raw := os.Getenv(configEnvVar)
	if raw == "" {
		return nil, fmt.Errorf("%s is not set", configEnvVar)
	}
	return parseConfig([]byte(raw))
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
