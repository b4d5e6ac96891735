package boot

// A sandbox with a network policy resolves names through the host: the host
// gives the resolver configuration, written here once the root is the
// sandbox's, over whatever the image had (a symlink is replaced, never followed),
// and the relay's configuration, whose ports are bound here.

import (
	"fmt"
	"os"

	"krunbox/agent/config"
	"krunbox/agent/egress"
)

// listenEgress binds the sandbox's proxy and resolver ports when it has a network policy
// (agent/egress relays them to the host); nil without one.
func listenEgress(c *config.Config) (*egress.Relay, error) {
	if c.Egress == nil {
		return nil, nil
	}
	if c.Mode != "namespace" {
		return nil, fmt.Errorf("an egress relay is for the namespace driver only")
	}
	return egress.Listen(c.Egress)
}

func writeResolvConf(c *config.Config) error {
	if c.ResolvConf == "" {
		return nil
	}
	if err := os.MkdirAll("/etc", 0o755); err != nil {
		return fmt.Errorf("/etc: %v", err)
	}
	tmp := "/etc/.resolv.conf.krunbox"
	os.Remove(tmp)
	if err := os.WriteFile(tmp, []byte(c.ResolvConf), 0o644); err != nil {
		return fmt.Errorf("write %s: %v", tmp, err)
	}
	if err := os.Rename(tmp, "/etc/resolv.conf"); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("replace /etc/resolv.conf: %v", err)
	}
	return nil
}
