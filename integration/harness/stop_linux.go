package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// groupThreadStates returns the scheduler state letter of every thread of
// every process in process group pgid (from /proc/<pid>/task/<tid>/stat),
// e.g. "TTTT" once SIGSTOP has taken effect, "RSSR" before.
func groupThreadStates(pgid int) (string, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return "", err
	}
	var states strings.Builder
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		_, pg, ok := readStat(filepath.Join("/proc", e.Name(), "stat"))
		if !ok || pg != pgid {
			continue // gone meanwhile, or another group
		}
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		for _, task := range tasks {
			if state, _, ok := readStat(task); ok {
				states.WriteByte(state)
			}
		}
	}
	return states.String(), nil
}

// readStat reads the state and the process group of a /proc stat file;
// ok is false if it vanished or does not parse. The command name (field 2)
// may hold spaces and parentheses, so fields are counted from the last ')'.
func readStat(path string) (state byte, pgrp int, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(s[i+1:]) // state ppid pgrp ...
	if len(f) < 3 || len(f[0]) != 1 {
		return 0, 0, false
	}
	pg, err := strconv.Atoi(f[2])
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], pg, true
}

// groupStopped reports whether no thread of process group pgid can run:
// each is stopped (T), stopped by a tracer (t), or dead (Z, X).
func groupStopped(pgid int) (bool, error) {
	states, err := groupThreadStates(pgid)
	if err != nil {
		return false, err
	}
	return strings.Trim(states, "TtZX") == "", nil
}
