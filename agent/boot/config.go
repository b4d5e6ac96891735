package boot

// The boot configuration. The namespace driver hands it over as an open file,
// whose fd KRUNBOX_AGENT_CONFIG_FD names: its create-time env holds the
// caller's secrets, and bwrap's command line (as the environment was, through
// --setenv) is readable by every local user. In-process tests may still pass it
// in KRUNBOX_AGENT_CONFIG. A VM cannot take it that way: libkrun puts the
// environment on the guest kernel command line, which splits at spaces and
// quotes, aborts on non-ASCII, keeps about 2 KiB and is readable by every
// guest process in /proc/cmdline. There the command line carries only
// KRUNBOX_BOOT=vm, and the configuration is config.json in a read-only
// virtio-fs share of its own (tag krunbox-boot) that the agent unmounts once
// read; the host deletes the file once the agent answers.

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
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
	if fd := os.Getenv(configFdEnvVar); fd != "" {
		raw, err := readConfigFd(fd)
		if err != nil {
			return nil, err
		}
		return config.Parse(raw)
	}
	raw := os.Getenv(config.EnvVar)
	if raw == "" {
		return nil, fmt.Errorf("neither %s nor %s is set", configFdEnvVar, config.EnvVar)
	}
	return config.Parse([]byte(raw))
}

// configFdEnvVar names the inherited fd the namespace driver's configuration is read from.
const configFdEnvVar = "KRUNBOX_AGENT_CONFIG_FD"

// readConfigFd reads the configuration from the inherited fd and closes it,
// so no command inherits it.
func readConfigFd(text string) ([]byte, error) {
	fd, err := strconv.Atoi(text)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q is not an inherited fd", configFdEnvVar, text)
	}
	f := os.NewFile(uintptr(fd), "agent-config")
	defer f.Close()
	raw, err := io.ReadAll(io.LimitReader(f, maxConfigBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read the configuration from fd %d: %v", fd, err)
	}
	if len(raw) > maxConfigBytes {
		return nil, fmt.Errorf("the configuration on fd %d is larger than %d bytes", fd, maxConfigBytes)
	}
	return raw, nil
}

// maxConfigBytes bounds what the agent reads at boot (an env of many secrets fits easily).
const maxConfigBytes = 16 << 20

// readBootShare reads config.json from the krunbox-boot share and unmounts
// it, so no guest process can reach it afterwards (they never hold the
// capability to mount it again).
func readBootShare() ([]byte, error) {
	rememberVMRoot()
	if err := os.MkdirAll(bootShareDir, 0o700); err != nil {
		return nil, err
	}
	const flags = syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOEXEC
	if err := mountShare(bootShareTag, bootShareDir, flags); err != nil {
		return nil, fmt.Errorf("mount virtiofs %q on %s: %v", bootShareTag, bootShareDir, err)
	}
	raw, err := os.ReadFile(filepath.Join(bootShareDir, bootConfigFile))
	if errU := syscall.Unmount(bootShareDir, syscall.MNT_DETACH); errU != nil && err == nil {
		err = fmt.Errorf("unmount %s: %v", bootShareDir, errU)
	}
	return raw, err
}
