package exec

// A pooled sandbox handed to its next lease (sandbox.reset): the next lease
// sees none of the previous one's commands, ids, idempotency keys or output.

import (
	"fmt"
	"time"
)

// ForgetAll waits until every command has ended (the host's reset killed
// their processes; the reaper notices each end) and then drops every record
// and its retained output. A command still running after wait fails the reset.
func (t *Commands) ForgetAll(wait time.Duration) error {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for _, c := range t.list() {
		select {
		case <-c.done:
		case <-deadline.C:
			return fmt.Errorf("command %s has not ended", c.id)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, c := range t.order {
		if !c.ended() {
			return fmt.Errorf("command %s started during the reset", c.id)
		}
	}
	for _, c := range t.order {
		c.log.forget()
	}
	t.byID = map[string]*Command{}
	t.byKey = map[string]*Command{}
	t.order = nil
	return nil
}
