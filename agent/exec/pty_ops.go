package exec

// exec.resize: a terminal command's window size (PROTOCOL.md "Commands").

import (
	"fmt"

	"krunbox/agent/protocol"
)

// HandleResize serves exec.resize. A command that has ended is left as it
// was (its terminal is gone, the resize lost nothing); a running one without a
// terminal is a bad argument.
func (t *Commands) HandleResize(st protocol.Stream, r *protocol.ExecResizeRequest) {
	size := ptySize{Cols: r.Cols, Rows: r.Rows}
	if err := validatePtySize(&size, ""); err != nil {
		_ = st.Fail(err)
		return
	}
	cmd := t.lookupCommand(st, r.CommandID)
	if cmd == nil {
		return
	}
	if err := cmd.resize(size); err == errNoPty {
		if !cmd.ended() {
			_ = st.Fail(protocol.BadArgumentError(fmt.Sprintf("command %q", r.CommandID), "was started without a terminal (pty)"))
			return
		}
	} else if err != nil {
		_ = st.Fail(protocol.InternalError("resize", err))
		return
	}
	_ = st.Respond(struct{}{})
}
