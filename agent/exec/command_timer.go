package exec

// Timers that stop counting while the sandbox is paused (command timeouts and
// kill-grace periods): a paused process cannot make progress, so its time
// budget must not run out either.

import (
	"sync"
	"time"
)

type timerSet struct {
	mu     sync.Mutex
	timers map[*pausableTimer]struct{}
	paused bool
}

type pausableTimer struct {
	set       *timerSet
	fn        func()
	mu        sync.Mutex
	remaining time.Duration
	startedAt time.Time // monotonic start of the current run
	t         *time.Timer
	running   bool
	done      bool
	gen       int // invalidates a fire that raced with pause/stop
}

func newTimerSet() *timerSet { return &timerSet{timers: map[*pausableTimer]struct{}{}} }

// after runs fn once d of unpaused time has elapsed.
func (s *timerSet) after(d time.Duration, fn func()) *pausableTimer {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := &pausableTimer{set: s, fn: fn, remaining: d}
	s.timers[p] = struct{}{}
	if !s.paused {
		p.mu.Lock()
		p.startLocked()
		p.mu.Unlock()
	}
	return p
}

func (p *pausableTimer) startLocked() {
	p.gen++
	gen := p.gen
	p.startedAt = time.Now()
	p.running = true
	if p.remaining < 0 {
		p.remaining = 0
	}
	p.t = time.AfterFunc(p.remaining, func() { p.fire(gen) })
}

func (p *pausableTimer) fire(gen int) {
	p.mu.Lock()
	if p.done || gen != p.gen {
		p.mu.Unlock()
		return
	}
	p.done = true
	p.mu.Unlock()
	p.set.mu.Lock()
	delete(p.set.timers, p)
	p.set.mu.Unlock()
	p.fn()
}

// stop cancels the timer; safe on nil and on a timer that already fired.
func (p *pausableTimer) stop() {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.done = true
	p.gen++
	if p.t != nil {
		p.t.Stop()
	}
	p.mu.Unlock()
	p.set.mu.Lock()
	delete(p.set.timers, p)
	p.set.mu.Unlock()
}

func (s *timerSet) pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused {
		return
	}
	s.paused = true
	for p := range s.timers {
		p.mu.Lock()
		if !p.done && p.running {
			p.t.Stop()
			p.gen++
			p.running = false
			p.remaining -= time.Since(p.startedAt)
		}
		p.mu.Unlock()
	}
}

func (s *timerSet) resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.paused {
		return
	}
	s.paused = false
	for p := range s.timers {
		p.mu.Lock()
		if !p.done && !p.running {
			p.startLocked()
		}
		p.mu.Unlock()
	}
}
