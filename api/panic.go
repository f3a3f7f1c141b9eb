package api

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// ErrInternal: a panic was recovered while serving the request, a bug in the
// gateway (HTTP 500, gRPC INTERNAL). It is defined here, at the bottom of the
// import order, so that the dispatcher's timers, the data plane's goroutines
// and the edge recover into one error (Recovered).
var ErrInternal = errors.New("internal error")

// PanicReporter is told of every panic Recovered turns into an error: where
// it was recovered ("http", "grpc", "module", "batch", "timer", ...), its
// cause (the panic's value and the function and line that panicked) and, the
// first time that cause is seen in the process, the goroutine's stack (nil
// afterwards, so a panic a client can trigger at will logs one stack, not one
// per request). It runs on the goroutine that panicked, after the recover.
type PanicReporter func(where, cause string, stack []byte)

var (
	panicReporter atomic.Pointer[PanicReporter]
	// panicCauses holds the causes whose stack was reported, at most
	// maxPanicCauses of them: past that, stacks are no longer reported (a
	// client could otherwise grow the set without end with distinct values).
	panicCauses    sync.Map
	panicCauseSeen atomic.Int32
)

const maxPanicCauses = 256

// ReportPanics makes r the process's panic reporter (nil: none). The gateway's
// wiring sets it once, before serving (kserve.NewServer); the last call wins.
func ReportPanics(r PanicReporter) {
	if r == nil {
		panicReporter.Store(nil)
		return
	}
	panicReporter.Store(&r)
}

// Recovered turns v, a value recover returned in a deferred call, into an
// error matching ErrInternal that names where and the cause, and reports it
// (ReportPanics). Call it directly from the deferred function that recovered,
// so that the stack it takes still holds the panicking frames:
//
//	defer func() {
//		if v := recover(); v != nil {
//			err = api.Recovered("batch", v)
//		}
//	}()
func Recovered(where string, v any) error {
	cause := panicCause(v)
	if r := panicReporter.Load(); r != nil {
		var stack []byte
		if _, seen := panicCauses.Load(cause); !seen && panicCauseSeen.Load() < maxPanicCauses {
			if _, loaded := panicCauses.LoadOrStore(cause, struct{}{}); !loaded {
				panicCauseSeen.Add(1)
				stack = debug.Stack()
			}
		}
		(*r)(where, cause, stack)
	}
	return fmt.Errorf("%w: panic recovered in %s: %s", ErrInternal, where, cause)
}

// panicCause names a panic by its value (at most 200 bytes of it) and the
// first frame below runtime.gopanic that is not the runtime's own: the
// function and line that panicked.
func panicCause(v any) string {
	msg := fmt.Sprint(v)
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	var pcs [32]uintptr
	n := runtime.Callers(3, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	past := false
	for {
		f, more := frames.Next()
		switch {
		case f.Function == "runtime.gopanic":
			past = true
		case past && !strings.HasPrefix(f.Function, "runtime."):
			return msg + " at " + f.Function + " (" + f.File + ":" + strconv.Itoa(f.Line) + ")"
		}
		if !more {
			return msg
		}
	}
}
