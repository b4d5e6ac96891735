package e2e

// Timing figures for the report (go test -run XXX -bench . ./e2e):
// bwrap spawn → READY, and the round trip of `true` over the socket.

import (
	"sort"
	"testing"
	"time"
)

func reportPercentiles(b *testing.B, d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	ms := func(p float64) float64 { return float64(d[int(p*float64(len(d)-1))]) / 1e6 }
	b.ReportMetric(ms(0.5), "p50-ms")
	b.ReportMetric(ms(0.9), "p90-ms")
	b.ReportMetric(ms(0.99), "p99-ms")
}

func BenchmarkBootToReady(b *testing.B) {
	prepare(b)
	var d []time.Duration
	for i := 0; i < b.N; i++ {
		s := boot(b, bootOpts{})
		d = append(d, s.readyIn)
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
	reportPercentiles(b, d)
}

func BenchmarkExecTrueRoundTrip(b *testing.B) {
	prepare(b)
	s := boot(b, bootOpts{})
	c := dial(b, s.sock)
	c.run("true") // warm the page cache
	var d []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		_, ch := c.open("exec.start", map[string]any{"argv": []string{"true"}, "follow": true})
		if r := collect(b, ch, 10*time.Second); r.isError {
			b.Fatalf("exec: %v", r.final)
		}
		d = append(d, time.Since(start))
	}
	reportPercentiles(b, d)
}

// BenchmarkStdoutThroughput streams 64 MiB of command output to the host
// under flow control (1 MiB window, the host grants as it consumes).
func BenchmarkStdoutThroughput(b *testing.B) {
	prepare(b)
	s := boot(b, bootOpts{})
	c := dial(b, s.sock)
	const size = 64 << 20
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_, ch := c.open("exec.start", map[string]any{"argv": []string{"head", "-c", "67108864", "/dev/zero"}, "follow": true})
		r := collect(b, ch, 60*time.Second)
		if len(r.stdout) != size {
			b.Fatalf("got %d bytes", len(r.stdout))
		}
	}
}
