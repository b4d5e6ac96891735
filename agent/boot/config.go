package boot

// The boot configuration. The namespace driver hands it over in
// KRUNBOX_AGENT_CONFIG. A VM cannot take it that way: libkrun puts the
// environment on the guest kernel command line, which splits at spaces and
// quotes, aborts on non-ASCII, keeps about 2 KiB and is readable by every
// guest process in /proc/cmdline. There the command line carries only
// KRUNBOX_BOOT=vm, and the configuration is config.json in a read-only
// virtio-fs share of its own (tag krunbox-boot) that the agent unmounts once
// read; the host deletes the file once the agent answers.

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"krunbox/agent/config"
)

const (
	bootEnvVar     = "KRUNBOX_BOOT" // "vm" on a VM's kernel command line
	bootShareTag   = "krunbox-boot"
	bootShareDir   = "/krunbox-boot"
	bootConfigFile = "config.json"
)

// bootsAsVM says whether this agent is a VM's PID 1, before any config exists.
func bootsAsVM() bool { return os.Getenv(bootEnvVar) == "vm" }

// EarlyMode is how to end the sandbox when the configuration itself fails.
func EarlyMode() Mode {
	if bootsAsVM() {
		return vmMode{}
	}
	return namespaceMode{}
}

// LoadConfig reads the agent's configuration: from the environment in a
// namespace, from the boot share in a VM.
func LoadConfig() (*config.Config, error) {
	if bootsAsVM() {
		raw, err := readBootShare()
		if err != nil {
			return nil, err
		}
		return config.Parse(raw)
	}
	raw := os.Getenv(config.EnvVar)
	if raw == "" {
		return nil, fmt.Errorf("%s is not set", config.EnvVar)
	}
	return config.Parse([]byte(raw))
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
