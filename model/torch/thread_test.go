package torch

import (
	"errors"
	"fmt"
	"iter"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// A goroutine that has called into libtorch stays on its OS thread, though
// it blocks and is woken from other threads between calls, so libgomp keeps
// one worker pool for it (claimThread).
func TestGoroutineKeepsItsThread(t *testing.T) {
	// Many Ps and busy neighbours, so that a goroutine not bound to its
	// thread resumes on another one within a few iterations.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(8))
	stop := make(chan struct{})
	defer close(stop)
	for range 8 {
		go func() {
			for {
				select {
				case <-stop:
					return
				default:
					time.Sleep(20 * time.Microsecond)
				}
			}
		}()
	}
	errc := make(chan error)
	go func() {
		s := NewScope()
		s.Close()
		tid := syscall.Gettid()
		wake := make(chan struct{})
		for i := range 300 {
			go func() { wake <- struct{}{} }() // woken by another goroutine
			<-wake
			time.Sleep(50 * time.Microsecond) // and by a timer
			runtime.Gosched()
			if got := syscall.Gettid(); got != tid {
				errc <- fmt.Errorf("iteration %d: on thread %d, want %d, the thread of its first scope", i, got, tid)
				return
			}
			switch i % 3 { // each way into libtorch: a scope, SetGrad, a lone op
			case 0:
				s := NewScope()
				s.Add(s.FromFloat32([]float32{1, 2}, 2), s.FromFloat32([]float32{3, 4}, 2))
				err := s.Err()
				s.Close()
				if err != nil {
					errc <- err
					return
				}
			case 1:
				SetGrad(false)()
			case 2:
				if GradEnabled() != true {
					errc <- fmt.Errorf("grad mode off outside SetGrad")
					return
				}
			}
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// The thread ends with its goroutine, and with it libgomp's pool for it.
func TestThreadEndsWithItsGoroutine(t *testing.T) {
	tidc := make(chan int)
	go func() {
		s := NewScope()
		s.Close()
		tidc <- syscall.Gettid()
	}()
	tid := <-tidc
	task := fmt.Sprintf("/proc/self/task/%d", tid)
	for range 1000 { // the runtime ends it right after the goroutine's return
		if _, err := os.Stat(task); os.IsNotExist(err) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("thread %d still runs 10 s after its goroutine ended", tid)
}

// TestMainThreadOnlyRunsMain: no goroutine but the main one runs on the
// main thread, which Go never ends: a goroutine that claimed it would leave
// its libgomp pool parked there for the life of the process (claimThread).
// Two hundred goroutines that each claim a thread and end, one after
// another, never get the main thread's id (the process id); without init's
// lock the first one did.
func TestMainThreadOnlyRunsMain(t *testing.T) {
	for i := range 200 {
		tidc := make(chan int)
		go func() {
			s := NewScope()
			s.Close()
			tidc <- syscall.Gettid()
		}()
		if tid := <-tidc; tid == os.Getpid() {
			t.Fatalf("goroutine %d claimed the main thread", i)
		}
	}
}

// OnOwnThread runs f on a thread other than the caller's, which ends after
// f, and returns f's error; the caller's thread stays unclaimed.
func TestOnOwnThread(t *testing.T) {
	runtime.LockOSThread() // so that ThreadClaimed asks about the caller's thread
	defer runtime.UnlockOSThread()
	caller := syscall.Gettid()
	var tid int
	wantErr := errors.New("from f")
	err := OnOwnThread(func() error {
		tid = syscall.Gettid()
		s := NewScope()
		defer s.Close()
		s.Add(s.FromFloat32([]float32{1, 2}, 2), s.FromFloat32([]float32{3, 4}, 2))
		if err := s.Err(); err != nil {
			return err
		}
		if !ThreadClaimed() {
			return errors.New("f's thread is not claimed after a scope")
		}
		return wantErr
	})
	if !errors.Is(err, wantErr) {
		t.Fatalf("OnOwnThread returned %v, want f's error", err)
	}
	if tid == caller {
		t.Fatalf("f ran on the caller's thread %d", tid)
	}
	if ThreadClaimed() {
		t.Fatal("the caller's thread was claimed")
	}
	task := fmt.Sprintf("/proc/self/task/%d", tid)
	for range 1000 {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("f's thread %d still runs 10 s after OnOwnThread returned", tid)
}

// TestScopesAcrossCoroutineSwitches: a coroutine created by a goroutine that
// has claimed its thread (ClaimThread) may switch back and forth with a
// scope, a child scope and a grad mode open: they take no lock on a claimed
// thread (holdThread), and a coroutine switch requires the lock count the
// coroutine was created with (the runtime throws otherwise, ending the
// test binary). The engine thread's generations rely on it (model/torchbe).
func TestScopesAcrossCoroutineSwitches(t *testing.T) {
	errc := make(chan error, 1)
	go func() {
		ClaimThread()
		var sums []float32
		next, stop := iter.Pull(func(yield func(struct{}) bool) {
			s := NewScope()
			defer s.Close()
			defer SetGrad(false)()
			x := s.FromFloat32([]float32{1, 2}, 2)
			for range 3 {
				c := s.Child()
				y := c.Add(x, x)
				v, err := Float32s(y)
				c.Close()
				if err != nil {
					errc <- err
					return
				}
				sums = append(sums, v[0]+v[1])
				sc := s.Child() // open across the switch
				if !yield(struct{}{}) {
					sc.Close()
					return
				}
				sc.Close()
			}
		})
		defer stop()
		for {
			if _, ok := next(); !ok {
				break
			}
		}
		if len(sums) != 3 || sums[0] != 6 {
			errc <- fmt.Errorf("sums %v, want [6 6 6]", sums)
			return
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
