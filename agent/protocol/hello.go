package protocol

import (
	"encoding/json"
	"fmt"
)

// What the agent reads of a host's HELLO and of a REQUEST before dispatch.

type HelloRequest struct {
	Versions   []int   `json:"versions"`
	VersionMin *int    `json:"versionMin"`
	VersionMax *int    `json:"versionMax"`
	Token      *string `json:"token"`
}

// ChooseVersion picks the highest version both sides speak: from the host's
// list, or from its versionMin..versionMax range (hosts before the list).
// 0: none in common.
func (h *HelloRequest) ChooseVersion() int {
	best := 0
	for _, v := range Versions {
		offered := false
		if h.Versions != nil {
			for _, hv := range h.Versions {
				offered = offered || hv == v
			}
		} else if h.VersionMin != nil && h.VersionMax != nil {
			offered = *h.VersionMin <= v && v <= *h.VersionMax
		}
		if offered && v > best {
			best = v
		}
	}
	return best
}

func (h *HelloRequest) Offered() string {
	if h.Versions != nil {
		return fmt.Sprint(h.Versions)
	}
	if h.VersionMin == nil || h.VersionMax == nil {
		return "no version"
	}
	return fmt.Sprintf("%d..%d", *h.VersionMin, *h.VersionMax)
}

type requestHead struct {
	Op     string   `json:"op"`
	Window *float64 `json:"window"`
}

// ReadRequestHead reads op and window. A wrongly typed op or window is the
// request's problem, not the frame's: the handler lookup or the contract's
// check then fails the stream with its bad-request code.
func ReadRequestHead(payload []byte) requestHead {
	var head requestHead
	_ = json.Unmarshal(payload, &head)
	return head
}
