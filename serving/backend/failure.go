package backend

import (
	"errors"
	"fmt"
)

// FailureReason classifies a permanent per-row failure.
type FailureReason string

const (
	// FailureRejected: the server refused the request itself (HTTP 4xx other
	// than 408 and 429): retrying the same request cannot succeed.
	FailureRejected FailureReason = "rejected"
	// FailureMalformed: the server answered, but the answer cannot be used
	// (wrong number of choices, missing log-probs that were asked for).
	FailureMalformed FailureReason = "malformed_response"
	// FailureEngine: the in-process engine failed on this row alone.
	FailureEngine FailureReason = "engine"
)

// RowFailure records why one row failed permanently. Stages write it to the
// row's error column instead of dropping the row.
type RowFailure struct {
	Reason  FailureReason
	Message string // human-readable detail: endpoint, status, server message
}

func (f *RowFailure) Error() string { return fmt.Sprintf("%s: %s", f.Reason, f.Message) }

// ErrUnavailable marks a call that failed because the engine could not run
// it now: it ran out of memory, or libtorch failed or panicked under it. The
// call failed on its own; the engine and any server around it stay usable,
// and the same request may succeed later or smaller. `evolm serve` answers
// it with HTTP 503, which clients retry.
var ErrUnavailable = errors.New("engine unavailable")
