package main

// krunbox-agent: PID 1 of a krunbox sandbox. See PROTOCOL.md for the wire
// contract and package boot for what happens before the first connection.

import (
	"log"
	"os"
	"os/signal"
	"syscall"

	"krunbox/agent/boot"
	"krunbox/agent/lifecycle"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("krunbox-agent: ")
	c, err := boot.LoadConfig()
	if err != nil {
		boot.Fail(boot.EarlyMode(), boot.StageErr("config", err))
	}
	mode := boot.ModeFor(c)
	immunizeSignals()
	a := newAgent(c)
	a.commands.StartReaper() // before anything can fork

	booted, berr := boot.Run(c, mode)
	if berr != nil {
		boot.Fail(mode, berr)
	}
	a.life.CtlDirFd, a.upper.DirFd, a.spawner = booted.CtlDirFd, booted.UpperDirFd, booted.Spawner
	if err := boot.LimitTasks(c.PidsMax, booted.Spawner); err != nil {
		boot.Fail(mode, boot.StageErr("limits", err))
	}
	a.life.Exit = func(reason string) { mode.Exit(lifecycle.ExitCode(reason)) }
	go a.life.Watch()
	if c.Mode == "namespace" {
		// The host waits for this line; a write error (host gone) changes nothing.
		_, _ = os.Stdout.Write([]byte("READY\n"))
	} else if err := boot.AnnounceListening(booted.CtlDirFd); err != nil {
		boot.Fail(mode, boot.StageErr("announce", err))
	}
	if err := a.server.serve(booted.Listener); err != nil {
		log.Printf("listener failed: %v", err)
	}
	select {} // lifecycle ends the process
}

// immunizeSignals routes every catchable standard signal to a channel nobody
// acts on. As PID 1 only signals we handle are delivered at all, and the Go
// runtime would otherwise die on SIGTERM/SIGINT/SIGHUP (or crash on a
// kill -ILL) from the workload. Handled (not ignored) signals are reset to
// their defaults in children at exec, so commands still see SIGPIPE and
// friends normally. SIGPIPE being handled also turns writes to a closed
// stdout into EPIPE errors instead of death. Left out: SIGKILL/SIGSTOP
// (uncatchable), SIGCHLD (the reaper's), SIGURG and SIGPROF (the runtime's).
func immunizeSignals() {
	var sigs []os.Signal
	for s := syscall.Signal(1); s <= 31; s++ {
		switch s {
		case syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGCHLD, syscall.SIGURG, syscall.SIGPROF:
			continue
		}
		sigs = append(sigs, s)
	}
	ch := make(chan os.Signal, 16)
	signal.Notify(ch, sigs...)
	go func() {
		for range ch {
		}
	}()
}
