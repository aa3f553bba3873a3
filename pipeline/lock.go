package pipeline

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LocksDir is the run directory's folder of stage lock files.
const LocksDir = "_locks"

// StageLockedError is returned by LockStage when another process (or another
// LockStage in this one) holds the stage's lock.
type StageLockedError struct {
	Run, Stage, File string
	PID              int // the holder's pid as it wrote it; 0: unknown
}

func (e *StageLockedError) Error() string {
	holder := "another process"
	if e.PID > 0 {
		holder = "process " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("run %s: stage %s is already running in %s (lock %s): wait for it to finish, or use another run directory",
		e.Run, e.Stage, holder, e.File)
}

// LockStage takes the exclusive lock of stage in the run directory: an
// flock on _locks/<stage>.lock, which holds the pid of its holder. Only one
// process at a time runs a stage on a run directory; a second gets a
// *StageLockedError naming the holder's pid. The kernel drops the lock when
// the holder exits, however it exits. unlock releases it.
func (r *Run) LockStage(stage string) (unlock func(), err error) {
	dir := filepath.Join(r.Dir, LocksDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("run %s: lock: %w", r.Dir, err)
	}
	p := filepath.Join(dir, stage+".lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("run %s: lock %s: %w", r.Dir, p, err)
	}
	if err := flockNB(f); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			b, _ := os.ReadFile(p)
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			return nil, &StageLockedError{Run: r.Dir, Stage: stage, File: p, PID: pid}
		}
		return nil, fmt.Errorf("run %s: lock %s: %w", r.Dir, p, err)
	}
	// The pid is for the message above; the flock is the lock.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() {
		_ = f.Truncate(0)
		f.Close() // releases the flock
	}, nil
}

func flockNB(f *os.File) error {
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// createTemp creates a hidden temp file ".<base>.<random>.tmp" in dir,
// flocked for as long as it is open: CleanTemp removes only temp files whose
// lock it can take, that is, those of writers that are gone.
func createTemp(dir, base string) (*os.File, error) {
	for range 100 {
		var rnd [6]byte
		_, _ = rand.Read(rnd[:])
		p := filepath.Join(dir, "."+base+"."+hex.EncodeToString(rnd[:])+TempSuffix)
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := flockNB(f); err != nil {
			f.Close()
			os.Remove(p)
			return nil, fmt.Errorf("lock temp file %s: %w", p, err)
		}
		// A sweep may have taken the lock between create and flock, and
		// removed the name: then this file is no longer at p; start over.
		if st, err := os.Stat(p); err == nil {
			if fst, err := f.Stat(); err == nil && os.SameFile(st, fst) {
				return f, nil
			}
		}
		f.Close()
	}
	return nil, fmt.Errorf("create temp file in %s: too many collisions", dir)
}

// removeIfDead removes the temp file at p unless a live writer holds its
// flock. It reports whether it removed it.
func removeIfDead(p string) (bool, error) {
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	if err := flockNB(f); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, nil // a live writer's
		}
		return false, err
	}
	// Holding the lock, the file is ours to remove; a writer that created it
	// and had not locked it yet sees the name gone and starts over.
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, err
	}
	return true, nil
}
