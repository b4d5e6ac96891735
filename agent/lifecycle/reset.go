package lifecycle

// A pooled sandbox handed to its next lease (sandbox.reset, agent/reset.go):
// the lifetime the lease sees is the member's own, as booted.

import "time"

// ResetForLease puts back the boot's TTL deadline and idle timeout (whatever
// sandbox.setLifetime moved), resumes a paused sandbox's bookkeeping and starts
// the idle clock now.
func (l *Lifecycle) ResetForLease() {
	l.resume()
	l.mu.Lock()
	l.expiresAt = l.cfg.ExpiresAt
	l.idleTimeoutMs = l.cfg.IdleTimeoutMs
	l.paused = false
	l.lastActivity = time.Now()
	l.lastActivityAt = l.lastActivity.UnixMilli()
	l.mu.Unlock()
	l.wake()
	l.WriteActivity()
}
